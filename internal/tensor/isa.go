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
