package config

import (
	"strings"
	"testing"
)

func TestStreamByteLimits(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.StreamSubmitMaxBytes != 0 || c.StreamReadyMaxBytes != 0 || c.StreamResultMaxBytes != 0 {
		t.Fatalf("defaults %d %d %d, want 0 (the storage's default)", c.StreamSubmitMaxBytes, c.StreamReadyMaxBytes, c.StreamResultMaxBytes)
	}
	for _, tc := range []struct {
		name, value string
		ok          bool
	}{
		{"BULKACTION_STREAM_SUBMIT_MAX_BYTES", "-1", true},
		{"BULKACTION_STREAM_SUBMIT_MAX_BYTES", "2147483648", true},
		{"BULKACTION_STREAM_READY_MAX_BYTES", "1048576", true}, // = MAX_MSG_SIZE
		{"BULKACTION_STREAM_READY_MAX_BYTES", "1048575", false},
		{"BULKACTION_STREAM_RESULT_MAX_BYTES", "-2", false},
		{"BULKACTION_STREAM_RESULT_MAX_BYTES", "4096", false},
		{"BULKACTION_STREAM_RESULT_MAX_BYTES", "lots", false},
		{"BULKACTION_STREAM_EVENTS_MAX_BYTES", "-1", true},
		{"BULKACTION_STREAM_EVENTS_MAX_BYTES", "4096", false},
		{"BULKACTION_STREAM_DLQ_MAX_BYTES", "1048576", true},
		{"BULKACTION_STREAM_DLQ_MAX_BYTES", "-2", false},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			_, err := Load()
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !strings.Contains(err.Error(), tc.name) {
				t.Fatalf("error does not name %s: %v", tc.name, err)
			}
			if err != nil && tc.value != "lots" && !strings.Contains(err.Error(), "MAX_MSG_SIZE (1048576)") {
				t.Fatalf("error does not state the limit: %v", err)
			}
		})
	}
}

func TestDLQPerSubjectSetting(t *testing.T) {
	c, err := Load()
	if err != nil || c.StreamDLQPerSubject != 1000 {
		t.Fatalf("default %d, %v; want 1000", c.StreamDLQPerSubject, err)
	}
	for v, ok := range map[string]bool{"-1": true, "1": true, "0": false, "-2": false} {
		t.Setenv("BULKACTION_STREAM_DLQ_MAX_MSGS_PER_SUBJECT", v)
		_, err := Load()
		if ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "STREAM_DLQ_MAX_MSGS_PER_SUBJECT")) {
			t.Errorf("%s: err = %v, want ok=%v", v, err, ok)
		}
	}
}
