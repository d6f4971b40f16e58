package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

func clientFor(t *testing.T, url string) *redis.Client {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}
