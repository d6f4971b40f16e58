package config

import "fmt"

// validateCallbacks checks the completion callback settings.
func (c *Config) validateCallbacks() error {
	for _, d := range []struct {
		name string
		v    any
		ok   bool
		want string
	}{
		{"CALLBACK_RETRY_FOR", c.CallbackRetryFor, c.CallbackRetryFor > 0, "must be positive"},
		{"CALLBACK_FIRST_RETRY", c.CallbackFirstRetry, c.CallbackFirstRetry > 0, "must be positive"},
		{"CALLBACK_TIMEOUT", c.CallbackTimeout, c.CallbackTimeout > 0, "must be positive"},
		{"CALLBACK_SECRET_GRACE", c.CallbackSecretGrace, c.CallbackSecretGrace >= 0, "must not be negative (0 = none)"},
	} {
		if !d.ok {
			return fmt.Errorf("config: %s_%s=%v: %s", Prefix, d.name, d.v, d.want)
		}
	}
	return nil
}
