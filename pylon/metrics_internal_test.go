package pylon

import (
	"bytes"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/pylon/admission"
)

// The admission histograms are in seconds; with MetricsReferenceNames the reference's
// millisecond histograms and tokens-per-second gauges are exported as well, with the same
// observations in their own units.
func TestMetricsReferenceNames(t *testing.T) {
	for _, reference := range []bool{false, true} {
		m := newPylonMetrics("pylon_", "p1", "v1", reference)
		mm := newModelMetrics(m, "m", func() *genSnapshot { return nil })
		mm.decision(admission.Decision{Result: admission.Accepted, ExpectedMs: 250, ActualMs: 1500})
		var b bytes.Buffer
		m.page().Write(&b, m.set.WritePrometheus)
		out := b.String()
		for _, want := range []string{
			`pylon_queue_admission_expected_seconds_sum{inference_server_id="p1",model_id="m"} 0.25`,
			`pylon_queue_admission_actual_seconds_sum{inference_server_id="p1",model_id="m"} 1.5`,
			`# TYPE pylon_model_last_mean_input_tokens_per_second gauge`,
			`pylon_retryable_responses_total{inference_server_id="p1",reason="queue_estimate_mismatch",status="429"} 0`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("reference %v: no %s", reference, want)
			}
		}
		for _, name := range []string{
			`pylon_queue_admission_expected_ms_sum{inference_server_id="p1",model_id="m"} 250`,
			`pylon_queue_admission_actual_ms_sum{inference_server_id="p1",model_id="m"} 1500`,
			`# TYPE pylon_model_output_tps gauge`, `# TYPE pylon_model_last_mean_input_tps gauge`, `# TYPE pylon_model_max_output_tps gauge`,
		} {
			if got := strings.Contains(out, name); got != reference {
				t.Errorf("reference %v: %s present: %v", reference, name, got)
			}
		}
	}
}

// A rejection by the free-slot rule alone counts as rejected and in its own counter; a
// rejection on the estimate does not.
func TestMetricsNoFreeSlot(t *testing.T) {
	m := newPylonMetrics("pylon_", "p1", "v1", false)
	mm := newModelMetrics(m, "m", func() *genSnapshot { return nil })
	mm.decision(admission.Decision{Result: admission.Rejected, ThresholdMs: 25, NoFreeSlot: true, Running: 8, Concurrency: 8})
	mm.decision(admission.Decision{Result: admission.Rejected, ActualMs: 100, ThresholdMs: 25})
	var b bytes.Buffer
	m.page().Write(&b, m.set.WritePrometheus)
	out := b.String()
	for _, want := range []string{
		`pylon_queue_admission_decisions_total{inference_server_id="p1",model_id="m",result="rejected"} 2`,
		`pylon_queue_admission_no_free_slot_total{inference_server_id="p1",model_id="m"} 1`,
		"# HELP pylon_queue_admission_no_free_slot_total ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in\n%s", want, out)
		}
	}
}
