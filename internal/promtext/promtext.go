// Package promtext writes a Switchyard binary's /metrics page in the Prometheus text format
// with a "# HELP" text and a "# TYPE" line on every metric family, so that promtool,
// Prometheus and OpenTelemetry collectors read the types (histograms included) and
// operators read what each series means.
//
// The metrics library (github.com/VictoriaMetrics/metrics) writes the "# TYPE" line and an
// empty "# HELP" line once metadata is exposed (metrics.ExposeMetadata, turned on by this
// package); it has no place for a help text. Page fills the text in from the binary's
// table, and fixes the few Go runtime and process series whose names or types the library
// writes against the Prometheus conventions (see runtimeRenames, runtimeRetypes).
package promtext

import (
	"bytes"
	"io"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

func init() { metrics.ExposeMetadata(true) }

// ContentType is the media type of the page.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Page is one binary's exposition: its namespace and the help text of its families.
type Page struct {
	// Prefix is the namespace every family of the binary starts with (switchyard_,
	// pylon_, switchyard_engine_).
	Prefix string
	// Help maps a family name without Prefix to its help text.
	Help map[string]string
}

var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Write writes parts (each writes series in the text format, with metadata, e.g. a
// metrics.Set's WritePrometheus), then the Go runtime and process series, to w, with the
// help texts filled in.
func (p Page) Write(w io.Writer, parts ...func(io.Writer)) {
	in, out := bufs.Get().(*bytes.Buffer), bufs.Get().(*bytes.Buffer)
	defer func() {
		in.Reset()
		out.Reset()
		bufs.Put(in)
		bufs.Put(out)
	}()
	for _, part := range parts {
		part(in)
	}
	metrics.WriteProcessMetrics(in) // go_* and process_*: memory, goroutines, GC, CPU
	metrics.WriteFDMetrics(in)      // process_open_fds, process_max_fds: connections
	p.rewrite(out, in.Bytes())
	_, _ = w.Write(out.Bytes())
}

// HelpOf returns the help text of a family ("" when none is known).
func (p Page) HelpOf(family string) string {
	if rest, ok := strings.CutPrefix(family, p.Prefix); ok && p.Prefix != "" {
		if h, ok := p.Help[rest]; ok {
			return h
		}
	}
	return runtimeHelp[family]
}

func (p Page) rewrite(out *bytes.Buffer, text []byte) {
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		switch {
		case bytes.HasPrefix(line, []byte("# HELP ")):
			rest := bytes.TrimSpace(line[len("# HELP "):])
			if len(rest) == 0 || bytes.IndexByte(rest, ' ') >= 0 {
				out.Write(line) // a help text is there already (or no family to describe)
				break
			}
			family := renamed(string(rest))
			out.WriteString("# HELP ")
			out.WriteString(family)
			if h := p.HelpOf(family); h != "" {
				out.WriteByte(' ')
				_, _ = helpEscaper.WriteString(out, h) // a bytes.Buffer: no error
			}
		case bytes.HasPrefix(line, []byte("# TYPE ")):
			f := strings.Fields(string(line[len("# TYPE "):]))
			if len(f) != 2 {
				out.Write(line)
				break
			}
			family, typ := renamed(f[0]), f[1]
			if t, ok := runtimeRetypes[family]; ok {
				typ = t
			}
			out.WriteString("# TYPE " + family + " " + typ)
		default:
			name := line
			if i := bytes.IndexAny(line, "{ "); i >= 0 {
				name = line[:i]
			}
			if to, ok := runtimeRenames[string(name)]; ok {
				out.WriteString(to)
				out.Write(line[len(name):])
			} else {
				out.Write(line)
			}
		}
		out.WriteByte('\n')
	}
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

func renamed(family string) string {
	if to, ok := runtimeRenames[family]; ok {
		return to
	}
	return family
}

// runtimeRenames are the library's runtime series whose names break the conventions: a
// counter without _total, a gauge ending in _count.
var runtimeRenames = map[string]string{
	"go_cgo_calls_count": "go_cgo_calls_total",
	"go_gc_forced_count": "go_gc_forced_total",
	"go_cpu_count":       "go_cpus",
}

// runtimeRetypes are the library's process series that are cumulative counters but typed
// as gauges.
var runtimeRetypes = map[string]string{
	"process_io_read_bytes_total":            "counter",
	"process_io_written_bytes_total":         "counter",
	"process_io_read_syscalls_total":         "counter",
	"process_io_write_syscalls_total":        "counter",
	"process_io_storage_read_bytes_total":    "counter",
	"process_io_storage_written_bytes_total": "counter",
}

// runtimeHelp describes the Go runtime and process series every binary exposes.
var runtimeHelp = map[string]string{
	"go_sched_latencies_seconds":                    "Time goroutines spent runnable before running.",
	"go_mutex_wait_seconds_total":                   "Time goroutines spent blocked on a sync.Mutex or sync.RWMutex.",
	"go_gc_mark_assist_cpu_seconds_total":           "CPU time goroutines spent helping the garbage collector mark.",
	"go_gc_cpu_seconds_total":                       "CPU time spent in the garbage collector.",
	"go_gc_pauses_seconds":                          "Stop-the-world pauses of the garbage collector.",
	"go_scavenge_cpu_seconds_total":                 "CPU time spent returning memory to the operating system.",
	"go_memlimit_bytes":                             "The Go runtime's soft memory limit (GOMEMLIMIT).",
	"go_memstats_alloc_bytes":                       "Bytes of allocated heap objects.",
	"go_memstats_alloc_bytes_total":                 "Bytes allocated for heap objects since the start.",
	"go_memstats_buck_hash_sys_bytes":               "Bytes of the profiling bucket hash table.",
	"go_memstats_frees_total":                       "Heap objects freed since the start.",
	"go_memstats_gc_cpu_fraction":                   "Fraction of the available CPU time used by the garbage collector since the start.",
	"go_memstats_gc_sys_bytes":                      "Bytes of garbage collection metadata.",
	"go_memstats_heap_alloc_bytes":                  "Bytes of allocated heap objects.",
	"go_memstats_heap_idle_bytes":                   "Bytes in idle (unused) heap spans.",
	"go_memstats_heap_inuse_bytes":                  "Bytes in in-use heap spans.",
	"go_memstats_heap_objects":                      "Allocated heap objects.",
	"go_memstats_heap_released_bytes":               "Bytes of physical memory returned to the operating system.",
	"go_memstats_heap_sys_bytes":                    "Bytes of heap memory obtained from the operating system.",
	"go_memstats_last_gc_time_seconds":              "Time of the last garbage collection, in seconds since the Unix epoch.",
	"go_memstats_lookups_total":                     "Pointer lookups performed by the runtime.",
	"go_memstats_mallocs_total":                     "Heap objects allocated since the start.",
	"go_memstats_mcache_inuse_bytes":                "Bytes of allocated mcache structures.",
	"go_memstats_mcache_sys_bytes":                  "Bytes of memory obtained from the operating system for mcache structures.",
	"go_memstats_mspan_inuse_bytes":                 "Bytes of allocated mspan structures.",
	"go_memstats_mspan_sys_bytes":                   "Bytes of memory obtained from the operating system for mspan structures.",
	"go_memstats_next_gc_bytes":                     "Heap size at which the next garbage collection starts.",
	"go_memstats_other_sys_bytes":                   "Bytes of other runtime allocations.",
	"go_memstats_stack_inuse_bytes":                 "Bytes in stack spans.",
	"go_memstats_stack_sys_bytes":                   "Bytes of stack memory obtained from the operating system.",
	"go_memstats_sys_bytes":                         "Bytes of memory obtained from the operating system.",
	"go_cgo_calls_total":                            "Calls from Go to C since the start.",
	"go_cpus":                                       "Logical CPUs usable by the process.",
	"go_gc_duration_seconds":                        "Pause durations of the garbage collector.",
	"go_gc_forced_total":                            "Garbage collections forced by the application (runtime.GC).",
	"go_gomaxprocs":                                 "GOMAXPROCS: the goroutines that can run at once.",
	"go_goroutines":                                 "Goroutines that exist.",
	"go_threads":                                    "Operating system threads created by the runtime.",
	"go_info":                                       "The Go version the binary was built with (always 1).",
	"go_info_ext":                                   "The Go runtime's GC percent and memory limit settings (always 1).",
	"process_cpu_seconds_system_total":              "CPU time spent in the kernel.",
	"process_cpu_seconds_total":                     "CPU time spent in total (user and kernel).",
	"process_cpu_seconds_user_total":                "CPU time spent in user space.",
	"process_major_pagefaults_total":                "Page faults that loaded a page from disk.",
	"process_minor_pagefaults_total":                "Page faults served without disk access.",
	"process_num_threads":                           "Operating system threads of the process.",
	"process_resident_memory_bytes":                 "Resident memory size.",
	"process_start_time_seconds":                    "Start time of the process, in seconds since the Unix epoch.",
	"process_virtual_memory_bytes":                  "Virtual memory size.",
	"process_virtual_memory_peak_bytes":             "Peak virtual memory size.",
	"process_resident_memory_peak_bytes":            "Peak resident memory size.",
	"process_resident_memory_anon_bytes":            "Resident anonymous memory (heap, stacks).",
	"process_resident_memory_file_bytes":            "Resident file-backed memory (the mapped binary and files).",
	"process_resident_memory_shared_bytes":          "Resident shared memory.",
	"process_io_read_bytes_total":                   "Bytes read by the process, through any read call.",
	"process_io_written_bytes_total":                "Bytes written by the process, through any write call.",
	"process_io_read_syscalls_total":                "Read system calls.",
	"process_io_write_syscalls_total":               "Write system calls.",
	"process_io_storage_read_bytes_total":           "Bytes read from storage.",
	"process_io_storage_written_bytes_total":        "Bytes written to storage.",
	"process_pressure_cpu_waiting_seconds_total":    "Time some of the process's tasks waited for a CPU (cgroup pressure).",
	"process_pressure_cpu_stalled_seconds_total":    "Time all of the process's tasks waited for a CPU (cgroup pressure).",
	"process_pressure_io_waiting_seconds_total":     "Time some of the process's tasks waited for I/O (cgroup pressure).",
	"process_pressure_io_stalled_seconds_total":     "Time all of the process's tasks waited for I/O (cgroup pressure).",
	"process_pressure_memory_waiting_seconds_total": "Time some of the process's tasks waited for memory (cgroup pressure).",
	"process_pressure_memory_stalled_seconds_total": "Time all of the process's tasks waited for memory (cgroup pressure).",
	"process_cgroup_cpu_throttled_seconds_total":    "Time the process's cgroup was throttled by its CPU quota.",
	"process_max_fds":                               "Maximum number of open file descriptors (connections count).",
	"process_open_fds":                              "Open file descriptors (connections count).",
}
