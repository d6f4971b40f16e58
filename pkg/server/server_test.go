package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/server"
)

func TestRunWorkerRejectsBadConfig(t *testing.T) {
	t.Setenv("BULKACTION_WORKER_COUNT", "-3")
	err := server.RunWorker(context.Background(), processor.NewMux())
	if err == nil || !strings.Contains(err.Error(), "BULKACTION_WORKER_COUNT") {
		t.Fatalf("err %v, want one naming BULKACTION_WORKER_COUNT", err)
	}
}

func TestRunNeedsATarget(t *testing.T) {
	if err := server.Run(context.Background(), nil, nil); err == nil {
		t.Fatal("Run with no target succeeded")
	}
}
