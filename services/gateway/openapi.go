package gateway

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the API's OpenAPI 3.1 document (docs/api.md).
//
//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the OpenAPI 3.1 document of the API.
func OpenAPI() []byte { return openAPIDoc }

// openAPI: GET /v1/openapi.json, without an API key.
func (g *Gateway) openAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openAPIDoc)
}
