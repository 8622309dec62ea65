//go:build amd64 && !purego

package tensor

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestAMXPacked compares the AMX kernels of 16-token products of packed
// Q8_0, Q4_0, Q2_K to Q6_K and IQ4_XS weights with the VNNI kernels bit for bit,
// through matMul, on shapes with odd numbers of row blocks, of column
// blocks (the Q8_0 and Q4_0 kernels take them in pairs) and of tokens
// (16-token passes and a VNNI tail), and a tail of unpacked rows. It runs
// only where the CPU has AMX-INT8 and the OS grants the tiles, and says so
// when not.
func TestAMXPacked(t *testing.T) {
	if err := amxPermit(); err != nil {
		t.Skipf("AMX kernels not run: this machine cannot use them (%v)", err)
	}
	t.Logf("AMX-INT8 granted; %s", AMX())
	forced := func(x *amxKernel) *amxKernel { f := *x; f.force = true; return &f }
	kernels := map[DType][2]kernel{ // VNNI, AMX
		Q8_0: {(&q80Rows{t: q80VNNI.t, p: q80VNNI.p}).run, (&q80Rows{t: q80VNNI.t, p: q80VNNI.p, amx: forced(q80AMX)}).run},
		Q4_0: {(&eightRows{n: q40VNNI.n, p: q40VNNI.p}).run, (&eightRows{n: q40VNNI.n, p: q40VNNI.p, amx: forced(q40AMX)}).run},
	}
	for _, k := range kPackedKernels {
		vnni, amx := *k, *k
		vnni.amx, amx.amx = nil, forced(k.amx)
		kernels[k.amx.typ] = [2]kernel{vnni.run, amx.run}
	}
	columns := map[DType][]int{
		Q8_0:   {32, 64, 96, 576, 32 * 37},
		Q4_0:   {32, 64, 96, 576, 32 * 37},
		Q4_K:   {256, 512, 256 * 3, 256 * 11},
		Q5_K:   {256, 256 * 3, 256 * 8},
		Q6_K:   {256, 512, 256 * 5},
		IQ4_XS: {256, 256 * 3, 256 * 8},
		Q3_K:   {256, 512, 256 * 5},
		Q2_K:   {256, 256 * 3},
	}
	rng := rand.New(rand.NewPCG(41, 42))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range []DType{Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K, Q2_K} {
		for _, cols := range columns[typ] {
			for _, rows := range []int{8, 13, 24, 67, 200} {
				m, _ := randMatrix(t, rng, typ, rows, cols)
				m = Pack(m)
				for _, n := range []int{16, 17, 32, 35, 70} {
					x := randVec(rng, n*cols, 1)
					want, got := make([]float32, n*rows), make([]float32, n*rows)
					p.matMul(want, m, x, n, kernels[typ][0])
					p.matMul(got, m, x, n, kernels[typ][1])
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %dx%d, %d tokens: output %d (token %d, row %d) = %v, want %v (VNNI)", typ, rows, cols, n, i, i/rows, i%rows, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestAMXRows compares the AMX kernels of 16-token products of Q8_0 and
// Q4_0 weights as the file has them (the tile layout of the activations)
// with the VNNI kernels bit for bit, through matMul on two threads: odd
// numbers of column blocks, row counts with and without a tail of fewer
// than 16 rows, and token counts whose work items start at tokens that
// are no multiple of 16. It runs only where the CPU has AMX-INT8 and the
// OS grants the tiles, and says so when not.
func TestAMXRows(t *testing.T) {
	if err := amxPermit(); err != nil {
		t.Skipf("AMX kernels not run: this machine cannot use them (%v)", err)
	}
	t.Logf("AMX-INT8 granted; %s", AMX())
	for _, x := range []*amxKernel{q80AMXRows, q40AMXRows} {
		x.force = true
		defer func() { x.force = false }()
	}
	kernels := map[DType][2]kernel{ // VNNI, AMX
		Q8_0: {(&q80Rows{t: q80VNNI.t, p: q80VNNI.p}).run, q80VNNI.run},
		Q4_0: {(&eightRows{n: q40VNNI.n, p: q40VNNI.p}).run, q40VNNI.run},
	}
	rng := rand.New(rand.NewPCG(43, 44))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range []DType{Q8_0, Q4_0} {
		for _, cols := range []int{32, 64, 96, 576, 32 * 37} {
			for _, rows := range []int{16, 24, 33, 67, 200} {
				m, _ := randMatrix(t, rng, typ, rows, cols)
				for _, n := range []int{16, 17, 32, 35, 70, 100} {
					x := randVec(rng, n*cols, 1)
					want, got := make([]float32, n*rows), make([]float32, n*rows)
					p.matMul(want, m, x, n, kernels[typ][0])
					if !p.act.tiled {
						t.Fatalf("%v %dx%d, %d tokens: no tile layout", typ, rows, cols, n)
					}
					p.matMul(got, m, x, n, kernels[typ][1])
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %dx%d, %d tokens: output %d (token %d, row %d) = %v, want %v (VNNI)", typ, rows, cols, n, i, i/rows, i%rows, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestAMXEncoding checks the bytes asmgen writes for the AMX instructions
// (Go's assembler has no mnemonics for them) with GNU objdump, where it is
// installed: each instruction of an AMX kernel that objdump decodes as a
// tile instruction must be the one the generator's comment names. This
// runs on any amd64 machine; executing the kernels needs AMX
// (TestAMXPacked).
func TestAMXEncoding(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Skip("no objdump to decode the AMX instructions with")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("kernels_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	for name, fn := range map[string]any{"q80AMXP_16": q80AMXP_16, "q40AMXP_16": q40AMXP_16, "q80AMXR_16": q80AMXR_16, "q40AMXR_16": q40AMXR_16, "q4KAMXP_16": q4KAMXP_16, "q5KAMXP_16": q5KAMXP_16, "q6KAMXP_16": q6KAMXP_16, "iq4XSAMXP_16": iq4XSAMXP_16, "q3KAMXP_16": q3KAMXP_16, "q2KAMXP_16": q2KAMXP_16, "bf16AMXR_16": bf16AMXR_16, "bf16AMXR_32": bf16AMXR_32} {
		got := decodedTileInsts(t, objdump, exe, fn)
		// The generator's comments, in order.
		var want []string
		body := src[bytes.Index(src, []byte("TEXT ·"+name+"(SB)")):]
		body = body[:bytes.Index(body, []byte("\tRET"))]
		for _, line := range strings.Split(string(body), "\n") {
			if i := strings.Index(line, "// "); i >= 0 && strings.HasPrefix(strings.TrimSpace(line), "BYTE") {
				want = append(want, normalizeIntel(line[i+3:]))
			}
		}
		if len(want) == 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("objdump decodes %s's tile instructions as\n%s\nthe generator meant\n%s", name, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		t.Logf("%s: %d AMX instructions decoded as written", name, len(got))
	}
}

// decodedTileInsts returns the tile instructions objdump finds in the
// assembly function fn of the running test binary exe, up to its first
// RET, in normalizeIntel's form.
func decodedTileInsts(t *testing.T, objdump, exe string, fn any) []string {
	t.Helper()
	// reflect gives the ABI wrapper, which calls the assembly (the test
	// binary has no symbol table to look it up by name).
	wrapper := uint64(reflect.ValueOf(fn).Pointer())
	start := uint64(0)
	out, err := exec.Command(objdump, "-d", fmt.Sprintf("--start-address=%#x", wrapper), fmt.Sprintf("--stop-address=%#x", wrapper+512), exe).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if i := strings.Index(line, "\tcall "); i >= 0 {
			// "call 0x6293e0" stripped, "call 6293e0 <name>" not
			fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(line[i+6:]), "0x"), "%x", &start)
			break
		}
	}
	if start == 0 {
		t.Fatalf("no call to the assembly in the wrapper at %#x", wrapper)
	}
	out, err = exec.Command(objdump, "-d", "--no-show-raw-insn", "-M", "intel",
		fmt.Sprintf("--start-address=%#x", start), fmt.Sprintf("--stop-address=%#x", start+32768), exe).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	var got []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.SplitN(line, "\t", 2)
		if len(f) < 2 {
			continue
		}
		ins := normalizeIntel(f[1])
		if strings.HasPrefix(ins, "tile") || strings.HasPrefix(ins, "tdp") || strings.HasPrefix(ins, "ldtilecfg") {
			got = append(got, ins)
		}
		if strings.HasPrefix(ins, "ret") {
			break
		}
	}
	return got
}

// normalizeIntel reduces an Intel-syntax instruction to a canonical form:
// lower case, no size keywords or spaces, "+0]" dropped, registers'
// 64-bit names, offsets in decimal.
func normalizeIntel(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.Index(s, "#"); i >= 0 {
		s = s[:i]
	}
	for _, r := range []string{"zmmword ptr ", "xmmword ptr ", "dword ptr ", "ptr ", "[rip"} {
		s = strings.ReplaceAll(s, r, "")
	}
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, ", ", ",")
	for _, r := range [][2]string{{"*1+", "+"}, {"*1]", "]"}, {"+0]", "]"}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	// objdump writes displacements in hex.
	if i := strings.Index(s, "+0x"); i >= 0 {
		j := i + 3
		for j < len(s) && strings.ContainsRune("0123456789abcdef", rune(s[j])) {
			j++
		}
		var v int
		fmt.Sscanf(s[i+3:j], "%x", &v)
		s = s[:i] + fmt.Sprintf("+%d", v) + s[j:]
	}
	return s
}

// TestAMXBF16 checks the AMX-BF16 family on shapes of odd numbers of row
// tiles (a pair a pass and one alone) and of chunks, and token counts
// over and under 16 and 32: each output against the float64 sum of its
// BF16 products (the tiles round in their own order, with denormals
// flushed), and bit for bit the same whatever else is in the product —
// every token alone, a work item's rows, tokens from an odd one — which
// is what batch invariance within the family rests on. It runs only where
// the CPU has AMX-BF16 and the OS grants the tiles, and says so when not.
func TestAMXBF16(t *testing.T) {
	if err := amxPermit(); err != nil || !amxBF16CPU() {
		t.Skipf("AMX-BF16 kernels not run: this machine cannot use them (AMX-BF16 %v, tiles granted: %v)", cpu.X86.HasAMXBF16, err)
	}
	t.Logf("AMX-BF16 granted; %s", AMXBF16())
	convert := func(x []float32, cols, n int) *actBuf {
		a := new(actBuf)
		a.prepare(BF16, cols, n, true)
		a.convertTokens(BF16, x, 0, n)
		return a
	}
	rng := rand.New(rand.NewPCG(45, 46))
	for _, cols := range []int{32, 96, 576, 2048} {
		for _, rows := range []int{16, 48, 80} {
			m, wd := randMatrix(t, rng, BF16, rows, cols)
			for _, n := range []int{1, 3, 16, 17, 32, 33, 70} {
				x := randVec(rng, n*cols, 1)
				a := convert(x, cols, n)
				got := make([]float32, n*rows)
				bf16AMXRun(got, rows, &m, 0, rows, a, 0, n)
				tiled := m
				tiled.Data = append([]byte(nil), m.Data...)
				packBF16Tiles(tiled.Data, m.RowBytes())
				tiled.packed = true
				for tok := 0; tok < n; tok++ {
					y := a.f[tok*cols : (tok+1)*cols]
					for r := 0; r < rows; r++ {
						var want, mag float64
						for c, v := range wd[r*cols : (r+1)*cols] {
							want += float64(v) * float64(y[c])
							mag += math.Abs(float64(v) * float64(y[c]))
						}
						if d := math.Abs(float64(got[tok*rows+r]) - want); d > 1e-5*mag+1e-30 {
							t.Fatalf("BF16 %dx%d, %d tokens: token %d row %d = %v, want %v (|Σ| %v)", rows, cols, n, tok, r, got[tok*rows+r], want, mag)
						}
					}
				}
				same := func(what string, out []float32, tok, r0, r1 int) {
					t.Helper()
					for r := r0; r < r1; r++ {
						if g, w := out[r], got[tok*rows+r]; math.Float32bits(g) != math.Float32bits(w) {
							t.Fatalf("BF16 %dx%d, %d tokens, %s: token %d row %d = %v, the whole product's %v", rows, cols, n, what, tok, r, g, w)
						}
					}
				}
				fromTiles := make([]float32, n*rows)
				bf16AMXRun(fromTiles, rows, &tiled, 0, rows, a, 0, n)
				for tok := 0; tok < n; tok++ {
					same("the tile layout", fromTiles[tok*rows:(tok+1)*rows], tok, 0, rows)
					one := make([]float32, rows)
					bf16AMXRun(one, rows, &tiled, 0, rows, convert(x[tok*cols:(tok+1)*cols], cols, 1), 0, 1)
					same("alone", one, tok, 0, rows)
				}
				part := make([]float32, n*rows)
				t0, r0 := min(5, n-1), 0
				if rows >= 48 {
					r0 = 16
				}
				r1 := rows - r0
				bf16AMXRun(part, rows, &m, r0, r1, a, t0, n)
				for tok := t0; tok < n; tok++ {
					same("rows and tokens of an item", part[tok*rows:(tok+1)*rows], tok, r0, r1)
				}
			}
		}
	}
}

// TestAMXBF16MatMul checks that where the probe chose the AMX-BF16 family
// every product of a BF16 matrix it takes is on the tiles, through MatMul
// on two threads, packed (in the tile layout) or not, and that the packed
// matrix's rows read back as the file's.
func TestAMXBF16MatMul(t *testing.T) {
	if !bf16AMX.on() {
		t.Skipf("the AMX-BF16 family is not in use on this machine (%q)", AMXBF16())
	}
	rng := rand.New(rand.NewPCG(47, 48))
	p := NewPool(2)
	defer p.Close()
	const rows, cols = 96, 576
	m, wd := randMatrix(t, rng, BF16, rows, cols)
	pm := Pack(Matrix{Type: BF16, Rows: rows, Cols: cols, Data: append([]byte(nil), m.Data...)})
	if !pm.packed {
		t.Fatal("Pack left a BF16 matrix on the tiles as the file has it")
	}
	row := make([]float32, cols)
	for r := range rows {
		pm.DequantizeRow(row, r)
		if !slices.Equal(row, wd[r*cols:(r+1)*cols]) {
			t.Fatalf("row %d of the tile layout reads %v…, want %v…", r, row[:4], wd[r*cols:r*cols+4])
		}
	}
	for _, n := range []int{1, 5, 40} {
		x := randVec(rng, n*cols, 1)
		got, fromPacked := make([]float32, n*rows), make([]float32, n*rows)
		p.MatMul(got, m, x, n)
		p.MatMul(fromPacked, pm, x, n)
		if !slices.Equal(fromPacked, got) {
			t.Fatalf("%d tokens: the packed matrix's products differ from the file layout's", n)
		}
		a := new(actBuf)
		a.prepare(BF16, cols, n, true)
		a.convertTokens(BF16, x, 0, n)
		want := make([]float32, n*rows)
		bf16AMXRun(want, rows, &m, 0, rows, a, 0, n)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%d tokens: output %d = %v, the tiles' %v", n, i, got[i], want[i])
			}
		}
	}
}

// TestDisableAMX: a process that turns the tiles off before its first
// product has every AMX kernel and the BF16 family off, says so where the
// CPU has them, and still computes; turning them off after the choice is
// refused and changes nothing. The first runs in a child process: the
// choice is the process's.
func TestDisableAMX(t *testing.T) {
	if os.Getenv("KVSERVE_TEST_AMX_OFF") == "1" {
		if err := DisableAMX(); err != nil {
			t.Fatalf("DisableAMX before any product: %v", err)
		}
		for _, x := range append(amxKernels[:], bf16AMX) {
			if x.on() {
				t.Fatalf("%v (rows %v) on the tiles after DisableAMX", x.typ, x.rows)
			}
		}
		if amxCPU() && AMX() != "AMX-INT8 present, turned off" {
			t.Fatalf("load line %q", AMX())
		}
		if amxBF16CPU() && AMXBF16() != "AMX-BF16 present, turned off" {
			t.Fatalf("BF16 load line %q", AMXBF16())
		}
		rng := rand.New(rand.NewPCG(53, 54))
		m, _ := randMatrix(t, rng, Q8_0, 32, 64)
		p := NewPool(1)
		defer p.Close()
		dst := make([]float32, 16*32)
		p.MatMul(dst, Pack(m), randVec(rng, 16*64, 1), 16)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestDisableAMX$", "-test.v")
	cmd.Env = append(os.Environ(), "KVSERVE_TEST_AMX_OFF=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestDisableAMX") {
		t.Fatalf("the child process that turned AMX off: %v\n%s", err, out)
	}
	amxChoice()
	if err := DisableAMX(); err == nil || amxOff.Load() {
		t.Fatalf("DisableAMX after the choice: %v, off %v", err, amxOff.Load())
	}
}
