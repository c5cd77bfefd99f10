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
	"github.com/switchyard/switchyard/gateway/lbconfig"
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
// (status, x-stargate-error-code, body, Retry-After; the legacy code with
// --legacy-input-work-error-code), and docs/gateway.md lists exactly these rows.
func TestRejectionTable(t *testing.T) {
	documented := map[string][]string{}
	for _, row := range docTable(t, "../docs/gateway.md", "| reason | status | code | legacy code | Retry-After |") {
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
		} else if row[1] != strconv.Itoa(rj.status) || row[2] != rj.code || row[3] != rj.legacyCode || row[4] != ra ||
			strings.HasPrefix(row[5], "*shed*") != rj.admission {
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

		// With --legacy-input-work-error-code only the code changes, and only on rows
		// with a legacy code.
		for _, legacy := range []bool{false, true} {
			g := &Gateway{cfg: Config{LegacyInputWorkErrorCode: legacy}}
			want := *routingError(r)
			if legacy && rj.legacyCode != "" {
				want.code = rj.legacyCode
			}
			if got := g.rejectionError(r); *got != want {
				t.Errorf("%s, legacy=%v: %+v, want %+v", name, legacy, *got, want)
			}
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

// Every class of refused routing expressions has a row in the expression table, the row is
// the answer written (status, type, code in the body and in x-stargate-error-code, the
// refusal's message), the code is the class's own name (the wire contract), and
// docs/gateway.md lists exactly these rows and docs/routing.md explains exactly these
// codes. A refused plain method name is an invalid_request without the header.
func TestExpressionRefusalTable(t *testing.T) {
	documented := map[string][]string{}
	for _, row := range docTable(t, "../docs/gateway.md", "| class | status | type | code |") {
		documented[row[0]] = row
	}
	explained := map[string]bool{}
	for _, row := range docTable(t, "../docs/routing.md", "| code | meaning |") {
		explained[row[0]] = true
	}
	classes := lbconfig.ExpressionClasses()
	if len(expressionRefusals) != len(classes) {
		t.Errorf("%d rows for %d classes", len(expressionRefusals), len(classes))
	}
	for _, c := range classes {
		name := string(c)
		rf, ok := expressionRefusals[c]
		if !ok {
			t.Errorf("%s: no row in expressionRefusals", name)
			continue
		}
		if rf.status != 400 || rf.kind != "invalid_request_error" || rf.code != name {
			t.Errorf("%s: row %+v, want 400 invalid_request_error with the class as the code", name, rf)
		}
		if row, ok := documented[name]; !ok {
			t.Errorf("%s: not in docs/gateway.md", name)
		} else if row[1] != strconv.Itoa(rf.status) || row[2] != rf.kind || row[3] != rf.code {
			t.Errorf("%s: docs/gateway.md says %q, the table %+v", name, row, rf)
		}
		delete(documented, name)
		if !explained[rf.code] {
			t.Errorf("%s: docs/routing.md does not explain the code", rf.code)
		}
		delete(explained, rf.code)

		xe := &lbconfig.ExpressionError{Value: "m;k=v", Class: c, Param: "k", Msg: "what is wrong"}
		var ctx fasthttp.RequestCtx
		writeError(&ctx, routingMethodError(fmt.Errorf("resolving: %w", xe)))
		var body errorBody
		if err := json.Unmarshal(ctx.Response.Body(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", name, ctx.Response.Body(), err)
		}
		h := &ctx.Response.Header
		if ctx.Response.StatusCode() != rf.status || string(h.Peek(wire.HeaderErrorCode)) != rf.code ||
			h.Peek(fasthttp.HeaderRetryAfter) != nil ||
			body.Error != (errorDetail{Message: xe.Error(), Type: rf.kind, Code: rf.code}) {
			t.Errorf("%s: wrote %d %q, body %s; want %+v", name, ctx.Response.StatusCode(), h.Peek(wire.HeaderErrorCode), ctx.Response.Body(), rf)
		}
	}
	for name := range documented {
		t.Errorf("docs/gateway.md lists %s, which is no expression class", name)
	}
	for code := range explained {
		t.Errorf("docs/routing.md explains %s, which is no expression class", code)
	}
	he := errorFor(routingMethodError(fmt.Errorf("%w: sticky", lbconfig.ErrUnknownAlgorithm)))
	if he.status != 400 || he.code != "invalid_request" || he.header || !strings.Contains(he.msg, wire.HeaderRoutingMethod) {
		t.Errorf("plain unknown method: %+v", he)
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
