package contracts

import _ "embed" // for the schema

// SchemaID is the "$id" of the JSON Schema returned by [Schema].
const SchemaID = "urn:bulkaction:contracts:v2"

//go:embed schema/bulkaction-v2.schema.json
var schema []byte

// Schema returns the JSON Schema (draft 2020-12) of every message of contract v2, for a gateway to
// serve or a producer in another language to validate against. Its "$defs" hold one definition per
// message — submission, readyBatch, resultBatch, groupEvent, deadLetter — and their parts; a body
// is validated against the definition of its subject, e.g. SchemaID + "#/$defs/submission". The
// schema cannot express a few rules the Decode functions enforce: the subject's authority over
// tenant and groupId, distinct job IDs within a jobs message, one type per ready message, the
// payload limit in compact form, and that integers carry no fraction or exponent. Each call returns
// a new copy.
func Schema() []byte { return append([]byte(nil), schema...) }
