package api

import "github.com/bulkaction/bulkaction/pkg/contracts"

// TenantWindows is the body of GET and PUT /v1/windows: a tenant's default
// sending windows, which each group it creates afterwards without windows
// of its own takes (groups that exist keep theirs). Windows is always a
// list; empty means none (such groups are always open).
type TenantWindows struct {
	Tenant  string             `json:"tenant,omitempty"`
	Windows []contracts.Window `json:"windows"`
}
