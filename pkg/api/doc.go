// Package api holds the bodies of bulkaction's HTTP API (`bulkaction
// gateway`, docs/api.md): the group views, lists and answers the gateway
// writes, and the RFC 9457 problem of its error answers. The gateway
// encodes them and Go clients decode them; the OpenAPI document
// (GET /v1/openapi.json) describes the same shapes for other languages.
package api
