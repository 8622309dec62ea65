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

// StreamedDirect reports whether this CPU computes a streamed matrix of
// type t (one left in its own bytes, not widened) with a direct kernel that
// unpacks each block in registers, rather than widening its rows into
// scratch for every product.
func StreamedDirect(t DType) bool {
	k, _ := directKernel(t, cpuISA)
	return k != nil
}

// StreamedPreferred reports whether this CPU computes a matrix of type t
// (one Widen converts) about as fast in its own bytes as widened, for one
// token and for a prompt's, so that widening it would only take memory:
// Q5_0, IQ4_NL, Q4_1 and Q5_1 where they have a packer (directPacker; only
// beside a direct kernel). Their decode then reads 18 to 24 bytes a block
// of 32 where the widened copy's reads 34 (36 with Q4_1's and Q5_1's
// minima), and a prompt's rows, unpacked once per thread and row range
// (packedItem), go through the widened copy's packed kernels
// (docs/performance.md has the measurements). Also Q4_1 where it has a
// packed layout of its own (the AVX2 level: q41AVX2Kernel, which also
// computes the file's rows in registers), and Q5_0, Q5_1 and IQ4_NL there
// where the weights are private (packed: private), since their packed
// kernels read 22, 24 and 18 bytes a block where the widened copy's read 34
// or 36, and the file's rows only widened again for every product.
func StreamedPreferred(t DType, private bool) bool {
	switch {
	case t == Q4_1 && packable(t):
		return true
	case (t == Q5_0 || t == Q5_1 || t == IQ4_NL) && packable(t):
		return private
	}
	return (t == IQ4_NL || t == Q5_0 || t == Q4_1 || t == Q5_1) && directPacker(t, cpuISA) != nil
}

// Packable reports whether Pack rewrites weights of type t on this CPU:
// whether they are faster in private memory than in a read-only mapping of
// the file, beyond the huge pages.
func Packable(t DType) bool { return packable(t) }
