package main

import (
	"context"
	"os"
	"strings"
	"testing"
)

// The README's configuration table is what `bulkaction config --markdown`
// prints: a setting added, renamed or re-defaulted must be documented.
func TestReadmeConfigTableIsCurrent(t *testing.T) {
	clearEnv(t)
	out, _, err := run(context.Background(), "", "config", "--markdown")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), strings.TrimSpace(out)) {
		t.Fatalf("README.md's configuration table differs from `bulkaction config --markdown`; paste its output:\n%s", out)
	}
}
