package conns_test

import (
	"testing"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestMaxRedisShardsAgrees(t *testing.T) {
	if config.MaxRedisShards != redisq.MaxShards {
		t.Fatalf("config.MaxRedisShards %d, redisq.MaxShards %d", config.MaxRedisShards, redisq.MaxShards)
	}
}
