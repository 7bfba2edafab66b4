package scale

// Metric names, as they appear in the CSV's metric column.
const (
	// Waiters sweep.
	MAcqRate             = "acquisitions_per_s"
	MWaitP50             = "wait_p50_ms"
	MWaitP99             = "wait_p99_ms"
	MWaitMax             = "wait_max_ms"
	MHandoff             = "handoff_to_other_pct"
	MGoroutinesPerWaiter = "client_goroutines_per_waiter"
	MHeapPerWaiter       = "client_heap_bytes_per_waiter"
	MServerCPUPerAcq     = "server_cpu_us_per_acquisition"

	// Held sweep.
	MCycleP50          = "acquire_release_p50_us"
	MCycleP99          = "acquire_release_p99_us"
	MHeapPerHeld       = "client_heap_bytes_per_held"
	MGoroutinesPerHeld = "client_goroutines_per_held"
	MServerMemPerHeld  = "server_memory_bytes_per_held"
	MServerCPUHolding  = "server_cpu_pct_while_holding"
	MClientCPUHolding  = "client_cpu_pct_while_holding"
	MStoreEntries      = "store_entries"
	MLeftoverEntries   = "store_entries_after_release"
	MServerMemAfter    = "server_memory_bytes_after_release"

	// Clients sweep (and MCycleP50/P99).
	MOpsRate        = "ops_per_s"
	MClientCPUPerOp = "client_cpu_us_per_op"
	MServerCPUPerOp = "server_cpu_us_per_op"
)

// A Chart is one panel: a metric of a sweep, targets as lines.
type Chart struct {
	Sweep, Metric, Title, YLabel string
}

// Charts lists the panels of each sweep's SVG, in order.
var Charts = []Chart{
	{SweepWaiters, MAcqRate, "acquisitions per second", "acquisitions/s"},
	{SweepWaiters, MWaitP99, "wait, 99th percentile", "ms"},
	{SweepWaiters, MWaitMax, "longest wait", "ms"},
	{SweepWaiters, MHandoff, "handoffs to another waiter", "%"},
	{SweepWaiters, MGoroutinesPerWaiter, "client goroutines per waiter", "goroutines"},
	{SweepWaiters, MHeapPerWaiter, "client heap per waiter", "bytes"},
	{SweepWaiters, MServerCPUPerAcq, "server CPU per acquisition", "µs"},

	{SweepHeld, MCycleP50, "acquire+release of another name, median", "µs"},
	{SweepHeld, MCycleP99, "acquire+release of another name, 99th percentile", "µs"},
	{SweepHeld, MServerMemPerHeld, "server memory per held lock", "bytes"},
	{SweepHeld, MHeapPerHeld, "client heap per held lock", "bytes"},
	{SweepHeld, MServerCPUHolding, "server CPU while only holding (renewals)", "% of a CPU"},
	{SweepHeld, MClientCPUHolding, "client CPU while only holding (renewals)", "% of a CPU"},

	{SweepClients, MOpsRate, "acquire+release per second, all clients", "ops/s"},
	{SweepClients, MCycleP99, "acquire+release, 99th percentile", "µs"},
	{SweepClients, MClientCPUPerOp, "client CPU per acquire+release", "µs"},
	{SweepClients, MServerCPUPerOp, "server CPU per acquire+release", "µs"},
}

// XLabel names a sweep's variable.
func XLabel(sweep string) string {
	switch sweep {
	case SweepWaiters:
		return "waiters on one name"
	case SweepHeld:
		return "names held at once"
	}
	return "clients, each on its own name"
}
