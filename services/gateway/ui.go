package gateway

import (
	"bytes"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/web"
)

// uiPrefix is where the dashboard is served.
const uiPrefix = "/ui/"

// uiStarted is the modification time of every dashboard file: the binary's
// start, so a new binary's assets are fetched again (embedded files have
// no time of their own).
var uiStarted = time.Now()

// uiCSP keeps the dashboard to its own files: no inline script, nothing
// from another origin, no framing.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// ui: GET /ui/ and GET /ui/{path...}, the dashboard's static files
// (public: the page asks for an API key and sends it with each API call).
// A path with no file of its own gets index.html, so the views' addresses
// can be bookmarked.
func (g *Gateway) ui(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(path.Clean("/"+r.PathValue("path")), "/")
	if name == "" {
		name = "index.html"
	}
	files := web.FS()
	b, err := fs.ReadFile(files, name)
	if err != nil {
		name = "index.html"
		if b, err = fs.ReadFile(files, name); err != nil {
			writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such file")
			return
		}
	}
	h := w.Header()
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, uiStarted, bytes.NewReader(b))
}

// uiRedirect: GET /, to the dashboard.
func (g *Gateway) uiRedirect(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, uiPrefix, http.StatusFound)
}
