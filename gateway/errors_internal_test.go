package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/switchyard/switchyard/gateway/dispatch"
	"github.com/switchyard/switchyard/internal/wire"
)

// docTable returns the rows of the markdown table of path whose header row starts with
// header (cells trimmed, backticks removed).
func docTable(t *testing.T, path, header string) [][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "|"):
			var row []string
			for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
				row = append(row, strings.ReplaceAll(strings.TrimSpace(c), "`", ""))
			}
			rows = append(rows, row)
		case in:
			return rows
		default:
		}
	}
	if !in {
		t.Fatalf("%s: no table starting %q", path, header)
	}
	return rows
}

// Every rejection reason has a row in the error table, the row is the answer written
// (status, x-stargate-error-code, body, Retry-After), and docs/gateway.md lists exactly
// these rows.
func TestRejectionTable(t *testing.T) {
	documented := map[string][]string{}
	for _, row := range docTable(t, "../docs/gateway.md", "| reason | status | code | Retry-After |") {
		documented[row[0]] = row
	}
	names := map[string]bool{}
	for r := dispatch.ReasonNone + 1; r < dispatch.NumReasons; r++ {
		name := r.String()
		if name == "" || name == "unknown" || names[name] {
			t.Errorf("reason %d: name %q missing or repeated", r, name)
		}
		names[name] = true
		rj := rejections[r]
		if rj.status == 0 || rj.code == "" || rj.msg == "" {
			t.Errorf("%s: no entry in the rejections table", name)
			continue
		}
		ra := ""
		if rj.retryAfter > 0 {
			ra = strconv.Itoa(rj.retryAfter)
		}
		if row, ok := documented[name]; !ok {
			t.Errorf("%s: not in docs/gateway.md", name)
		} else if row[1] != strconv.Itoa(rj.status) || row[2] != rj.code || row[3] != ra ||
			strings.HasPrefix(row[4], "*shed*") != rj.admission {
			t.Errorf("%s: docs/gateway.md says %q, the table %+v", name, row, rj)
		}
		delete(documented, name)

		var ctx fasthttp.RequestCtx
		writeError(&ctx, routingError(r))
		var body errorBody
		if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", name, ctx.Response.Body(), err)
		}
		h := &ctx.Response.Header
		if ctx.Response.StatusCode() != rj.status || string(h.Peek(wire.HeaderErrorCode)) != rj.code ||
			string(h.Peek(fasthttp.HeaderRetryAfter)) != ra || string(h.ContentType()) != "application/json" ||
			body.Error != (errorDetail{Message: rj.msg, Type: "server_error", Code: rj.code}) {
			t.Errorf("%s: wrote %d %q, Retry-After %q, body %s; want %+v", name, ctx.Response.StatusCode(),
				h.Peek(wire.HeaderErrorCode), h.Peek(fasthttp.HeaderRetryAfter), ctx.Response.Body(), rj)
		}
	}
	for name := range documented {
		t.Errorf("docs/gateway.md lists %s, which is no reason", name)
	}
	// The answers the existing clients and tests rely on.
	for _, tc := range []struct {
		r      dispatch.Reason
		status int
		code   string
	}{
		{dispatch.ReasonNoCandidates, 404, "no_eligible_candidates"},
		{dispatch.ReasonNoEligibleBackend, 503, "no_eligible_backend"},
		{dispatch.ReasonUnavailable, 503, "no_eligible_backend"},
		{dispatch.ReasonCapacityUnavailable, 503, "overloaded_error"},
		{dispatch.ReasonInputWorkLimit, 503, "overloaded_error"},
		{dispatch.ReasonInputWorkCapacity, 503, "overloaded_error"},
		{dispatch.ReasonShuttingDown, 503, "shutting_down"},
		{dispatch.ReasonSchedulerFailed, 503, "routing_failed"},
	} {
		if he := routingError(tc.r); he.status != tc.status || he.code != tc.code || !he.header {
			t.Errorf("%s: %d %s, want %d %s", tc.r, he.status, he.code, tc.status, tc.code)
		}
	}
	if he := routingError(dispatch.ReasonNone); he.status != 500 || he.code != "internal_error" {
		t.Errorf("no reason: %d %s, want 500 internal_error", he.status, he.code)
	}
}

// The front end's error classes are what docs/gateway.md lists.
func TestErrorClassTable(t *testing.T) {
	documented := map[string][]string{}
	for _, row := range docTable(t, "../docs/gateway.md", "| status | type | code | when |") {
		documented[row[0]+" "+row[1]+" "+row[2]] = row
	}
	written := make([]*httpError, 0, len(errorClasses)+2)
	for _, c := range errorClasses {
		he := errorFor(fmt.Errorf("%w: detail", c.class))
		if he.msg != c.class.Error()+": detail" || he.header {
			t.Errorf("%v: message %q, header %v", c.class, he.msg, he.header)
		}
		written = append(written, he)
	}
	written = append(written, errorFor(errHeadersTooLarge), errorFor(errors.New("secret detail")))
	for _, he := range written {
		key := strconv.Itoa(he.status) + " " + he.kind + " " + he.code
		if _, ok := documented[key]; !ok {
			t.Errorf("%s: not in docs/gateway.md", key)
		}
		delete(documented, key)
	}
	for key := range documented {
		t.Errorf("docs/gateway.md lists %s, which the gateway never writes", key)
	}
	if he := errorFor(errors.New("secret detail")); he.msg != "internal error" {
		t.Errorf("an unclassified error shows %q", he.msg)
	}
}
