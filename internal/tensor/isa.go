package tensor

// isa is an instruction-set level of the kernels; each architecture file
// defines the levels it has beyond isaPortable and cpuISA, the best one the
// running CPU supports.
type isa uint8

const isaPortable isa = 0

// availableISAs lists the levels usable on this CPU, lowest first (tests run
// every kernel at each of them).
func availableISAs() []isa {
	var l []isa
	for i := isaPortable; i <= cpuISA; i++ {
		l = append(l, i)
	}
	return l
}

// kernelFor returns the fastest available kernel for weights of type t.
func kernelFor(t DType) kernel { return kernelAt(t, cpuISA) }

// Kernels names the kernel level this CPU runs (the fastest of the levels
// this build has, chosen by CPU feature at start-up).
func Kernels() string { return cpuISA.String() }

// Packable reports whether Pack rewrites weights of type t on this CPU:
// whether they are faster in private memory than in a read-only mapping of
// the file, beyond the huge pages.
func Packable(t DType) bool { return packable(t) }
