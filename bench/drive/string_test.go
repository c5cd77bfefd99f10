package drive

import (
	"fmt"
	"time"

	"github.com/switchyard/switchyard/bench/score"
)

// String summarises a record for plain progress lines.
func String(r *score.Record) string {
	if r.OK() {
		return fmt.Sprintf("%s ok backend=%s ttft=%v ttlt=%v", r.ID, r.Backend, r.TTFT.Round(time.Millisecond), r.TTLT.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s failed status=%d backend=%s error=%q", r.ID, r.Status, r.Backend, r.Error)
}
