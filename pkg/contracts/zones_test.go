package contracts_test

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// tzif is a time zone file (TZif, RFC 8536, version 1) of a zone that is
// always at offset seconds east of UTC.
func tzif(offset int32) []byte {
	b := []byte("TZif")
	b = append(b, make([]byte, 16)...) // version 1, reserved
	// isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
	for _, n := range []uint32{0, 0, 0, 0, 1, 4} {
		b = binary.BigEndian.AppendUint32(b, n)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(offset))
	b = append(b, 0, 0) // not DST, designation at 0
	return append(b, "FAK\x00"...)
}

// The zones of sending windows come with the binary, not from the host: a
// host whose database says Europe/Berlin is five hours east of UTC all
// year (ZONEINFO pointing at it, as a stale or tampered /usr/share/zoneinfo
// would) changes neither the zone LoadZone returns nor a window's
// intervals. The check runs in a child process, since the time package
// reads ZONEINFO once.
func TestZonesComeWithTheBinary(t *testing.T) {
	if os.Getenv("BULKACTION_TEST_HOST_ZONEINFO") != "" {
		loc, err := contracts.LoadZone("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		summer := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
		winter := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
		if _, off := summer.In(loc).Zone(); off != 2*3600 {
			t.Errorf("Europe/Berlin in July: offset %ds, want 7200 (CEST) whatever the host's database says", off)
		}
		if _, off := winter.In(loc).Zone(); off != 3600 {
			t.Errorf("Europe/Berlin in January: offset %ds, want 3600 (CET)", off)
		}
		if _, err := contracts.LoadZone("Fake/Host"); err == nil {
			t.Error("a zone only the host's database has was taken")
		}
		return
	}
	dir := t.TempDir()
	for _, name := range []string{"Europe/Berlin", "Fake/Host"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, tzif(5*3600), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestZonesComeWithTheBinary$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ZONEINFO="+dir, "BULKACTION_TEST_HOST_ZONEINFO=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("with the host's database at %s: %v\n%s", dir, err, out)
	}
}
