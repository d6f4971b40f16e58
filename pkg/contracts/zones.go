package contracts

import (
	"archive/zip"
	"bytes"
	_ "embed" // the time zone database
	"errors"
	"io"
	"sync"
	"time"
)

// zoneinfo is the IANA Time Zone Database as the Go distribution ships it
// ($GOROOT/lib/time/zoneinfo.zip, the data of time/tzdata): sending windows
// are computed from it on every host alike, whatever database the host has
// or lacks. `go generate ./pkg/contracts` copies the one of the Go in use.
//
//go:generate sh -c "cp \"$(go env GOROOT)/lib/time/zoneinfo.zip\" zoneinfo.zip"
//go:embed zoneinfo.zip
var zoneinfo []byte

var errUnknownZone = errors.New("not in the time zone database")

var zones struct {
	once  sync.Once
	files map[string]*zip.File
	err   error
	mu    sync.Mutex
	locs  map[string]*time.Location
}

// loadEmbeddedZone returns the location named zone from the embedded
// database, never from the host's (time.LoadLocation reads the host's
// first). Locations are kept once loaded.
func loadEmbeddedZone(zone string) (*time.Location, error) {
	if zone == "UTC" {
		return time.UTC, nil
	}
	zones.once.Do(func() {
		r, err := zip.NewReader(bytes.NewReader(zoneinfo), int64(len(zoneinfo)))
		if err != nil {
			zones.err = err
			return
		}
		zones.files = make(map[string]*zip.File, len(r.File))
		for _, f := range r.File {
			zones.files[f.Name] = f
		}
		zones.locs = map[string]*time.Location{}
	})
	if zones.err != nil {
		return nil, zones.err
	}
	zones.mu.Lock()
	defer zones.mu.Unlock()
	if loc, ok := zones.locs[zone]; ok {
		return loc, nil
	}
	f, ok := zones.files[zone]
	if !ok {
		return nil, errUnknownZone
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	loc, err := time.LoadLocationFromTZData(zone, data)
	if err != nil {
		return nil, err
	}
	zones.locs[zone] = loc
	return loc, nil
}
