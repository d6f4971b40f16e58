package gateway

// Routes lists "METHOD /pattern" of every route, in the OpenAPI document's
// path syntax ({name}).
func (g *Gateway) Routes() []string {
	var out []string
	for _, rt := range g.table() {
		out = append(out, rt.method+" "+rt.pattern)
	}
	return out
}

// OperationIDs maps "METHOD /pattern" of every route, as [Gateway.Routes]
// lists them, to the route's operationId in the OpenAPI document
// (openapi.json), so a test can hold the two to each other. It reads only
// the route table: a Gateway made with new(Gateway) will do.
func (g *Gateway) OperationIDs() map[string]string {
	out := map[string]string{}
	for _, rt := range g.table() {
		out[rt.method+" "+rt.pattern] = rt.op
	}
	return out
}

// ReadersPerTenant is how many jobs requests of a tenant a replica reads
// at once.
var ReadersPerTenant = readersPerTenant
