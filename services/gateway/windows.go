package gateway

import (
	"io"
	"net/http"
	"strconv"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// getTenantWindows: GET /v1/windows. The tenant's default sending windows.
func (g *Gateway) getTenantWindows(w http.ResponseWriter, r *http.Request) {
	tenant, ok := settingsTenant(w, r)
	if !ok {
		return
	}
	ws, err := g.q.TenantWindows(r.Context(), tenant)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tenantWindowsView(tenant, ws))
}

// setTenantWindows: PUT /v1/windows with {"windows": [...]}. Replaces the
// tenant's default sending windows (an empty list removes them) and
// answers them; groups that exist keep the windows they have. They are
// written to the tenants bucket, then to Redis (package tenantset).
func (g *Gateway) setTenantWindows(w http.ResponseWriter, r *http.Request) {
	tenant, ok := settingsTenant(w, r)
	if !ok {
		return
	}
	const hint = `send {"windows": [{"zone", "days", "from", "to"}, …]} ([] removes them)`
	var body struct {
		Windows *[]contracts.Window `json:"windows"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the body could not be read")
		return
	}
	if fe := decodeBody(raw, &body, "windows"); fe != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, hint, *fe)
		return
	}
	if body.Windows == nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, hint,
			FieldError{Field: "windows", Detail: "missing", Limit: "a list of at most " + strconv.Itoa(contracts.MaxWindows) + " windows, [] for none"})
		return
	}
	if err := contracts.ValidateWindows("windows", *body.Windows); err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, hint, fieldError(err))
		return
	}
	ts, err := g.tenantSettings(r.Context())
	if err == nil {
		err = ts.SetWindows(r.Context(), tenant, *body.Windows)
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	g.log.Info("tenant windows set", "tenant", tenant, "windows", len(*body.Windows))
	writeJSON(w, http.StatusOK, tenantWindowsView(tenant, *body.Windows))
}

func tenantWindowsView(tenant string, ws []contracts.Window) api.TenantWindows {
	if ws == nil {
		ws = []contracts.Window{}
	}
	return api.TenantWindows{Tenant: tenant, Windows: ws}
}
