// Package web holds the dashboard's static assets (docs/ARCHITECTURE.md §10): plain
// HTML, CSS and JavaScript modules, with no build step and nothing loaded
// from outside, embedded in the binary and served by the gateway at /ui/.
package web

import (
	"embed"
	"io/fs"
)

//go:embed index.html app.css js
var assets embed.FS

// FS is the dashboard's files: index.html, app.css and js/*.js.
func FS() fs.FS { return assets }
