package config

import _ "embed"

// Schema is the JSON Schema (draft 2020-12) of the configuration document,
// plugin/config/schema.json. It describes every field with its type, range,
// pattern, default and description, for editors and CI; Parse remains the
// authority, and the schema's description lists the few rules that only
// Parse checks (duplicate names, max_delay <= 60s, time spans). `sluice
// schema` prints it.
//
//go:embed schema.json
var Schema []byte
