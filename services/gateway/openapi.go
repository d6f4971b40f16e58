package gateway

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"strings"
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

// queryParam is a query parameter an operation takes.
type queryParam struct {
	// repeats is true for an array parameter (?state=a&state=b).
	repeats bool
}

// queryParams maps each operationId of the OpenAPI document to the query
// parameters it takes: a request with any other is refused
// (checkQuery), so the document is the one list of them.
var queryParams = func() map[string]map[string]queryParam {
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Parameters map[string]openAPIParam `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDoc, &d); err != nil {
		panic("gateway: openapi.json: " + err.Error())
	}
	resolve := func(p openAPIParam) openAPIParam {
		if name, ok := strings.CutPrefix(p.Ref, "#/components/parameters/"); ok {
			return d.Components.Parameters[name]
		}
		return p
	}
	out := map[string]map[string]queryParam{}
	for _, item := range d.Paths {
		var shared []openAPIParam
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				panic("gateway: openapi.json: " + err.Error())
			}
		}
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct {
				ID         string         `json:"operationId"`
				Parameters []openAPIParam `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil || op.ID == "" {
				continue
			}
			ps := map[string]queryParam{}
			for _, p := range append(append([]openAPIParam{}, shared...), op.Parameters...) {
				if p = resolve(p); p.In == "query" {
					ps[p.Name] = queryParam{repeats: p.Schema.Type == "array"}
				}
			}
			out[op.ID] = ps
		}
	}
	return out
}()

// openAPIParam is a parameter object of the OpenAPI document.
type openAPIParam struct {
	Ref    string `json:"$ref"`
	Name   string `json:"name"`
	In     string `json:"in"`
	Schema struct {
		Type any `json:"type"`
	} `json:"schema"`
}
