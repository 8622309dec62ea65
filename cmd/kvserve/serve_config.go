package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kvserve/kvserve/internal/kv"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Configuration layers for `kvserve serve`: command-line flags win over
// KVSERVE_<FLAG> environment variables, which win over the YAML file, which
// wins over the defaults. Every flag is available in all three places under
// the same name: --kv-cache-memory, KVSERVE_KV_CACHE_MEMORY, kv-cache-memory:.

// envName returns the environment variable of a flag.
func envName(flag string) string {
	return "KVSERVE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyLayers sets every flag not given on the command line from the
// environment, then from the YAML file named by the config flag (if any).
func applyLayers(fs *pflag.FlagSet, configFlag string, getenv func(string) string) error {
	fromEnv := map[string]bool{}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		v := getenv(envName(f.Name))
		if v == "" {
			return
		}
		if isList(f) {
			for _, item := range strings.Split(v, ",") {
				if item = strings.TrimSpace(item); item != "" {
					if e := f.Value.Set(item); e != nil {
						err = fmt.Errorf("%s: %w", envName(f.Name), e)
						return
					}
				}
			}
		} else if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("%s=%q: %w", envName(f.Name), v, e)
			return
		}
		fromEnv[f.Name] = true
	})
	if err != nil {
		return err
	}
	path := fs.Lookup(configFlag).Value.String()
	if path == "" {
		return nil
	}
	values, err := readConfigFile(path)
	if err != nil {
		return err
	}
	for key, vals := range values {
		f := fs.Lookup(key)
		if f == nil || key == configFlag {
			return fmt.Errorf("config %s: unknown setting %q (settings are the flag names of `kvserve serve --help`)", path, key)
		}
		if f.Changed || fromEnv[key] {
			continue
		}
		if len(vals) > 1 && !isList(f) {
			return fmt.Errorf("config %s: %s takes one value", path, key)
		}
		for _, v := range vals {
			if err := f.Value.Set(v); err != nil {
				return fmt.Errorf("config %s: %s: %w", path, key, err)
			}
		}
	}
	return nil
}

func isList(f *pflag.Flag) bool {
	t := f.Value.Type()
	return strings.HasSuffix(t, "Array") || strings.HasSuffix(t, "Slice")
}

// readConfigFile reads a YAML mapping of flag names to scalars or lists of
// scalars.
func readConfigFile(path string) (map[string][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	out := map[string][]string{}
	for k, v := range raw {
		switch x := v.(type) {
		case nil:
		case []any:
			for _, item := range x {
				s, err := scalar(item)
				if err != nil {
					return nil, fmt.Errorf("config %s: %s: %w", path, k, err)
				}
				out[k] = append(out[k], s)
			}
		default:
			s, err := scalar(x)
			if err != nil {
				return nil, fmt.Errorf("config %s: %s: %w", path, k, err)
			}
			out[k] = []string{s}
		}
	}
	return out, nil
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	}
	return "", fmt.Errorf("want a scalar value, got %T", v)
}

// byteSize is a flag value of a size in bytes: "4GiB", "512MiB", "2G",
// "1500000".
type byteSize int64

func (b *byteSize) String() string {
	if *b == 0 {
		return "auto"
	}
	return formatBytes(int64(*b))
}

func (b *byteSize) Type() string { return "size" }

func (b *byteSize) Set(s string) error {
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

// parseBytes parses a size with an optional unit: B, K/KB/KiB, M/MB/MiB,
// G/GB/GiB, T/TB/TiB (K, M, G, T are powers of 1024; KB, MB, GB, TB powers
// of 1000), or "auto" (0).
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "auto") {
		return 0, nil
	}
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || num < 0 {
		return 0, fmt.Errorf("invalid size %q (e.g. 4GiB, 512MiB)", s)
	}
	mult := 1.0
	switch strings.ToLower(strings.TrimSpace(s[i:])) {
	case "", "b":
	case "k", "kib":
		mult = 1 << 10
	case "m", "mib":
		mult = 1 << 20
	case "g", "gib":
		mult = 1 << 30
	case "t", "tib":
		mult = 1 << 40
	case "kb":
		mult = 1e3
	case "mb":
		mult = 1e6
	case "gb":
		mult = 1e9
	case "tb":
		mult = 1e12
	default:
		return 0, fmt.Errorf("invalid size unit in %q (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	v := num * mult
	if v > 1<<62 {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return int64(v), nil
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
	return strconv.FormatInt(n, 10)
}

// memAvailable reads MemAvailable from /proc/meminfo (0 if unknown).
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// Default KV cache sizing: a quarter of the available memory, within
// [minKVMemory, maxKVMemory].
const (
	minKVMemory = 256 << 20
	maxKVMemory = 4 << 30
)

func defaultKVMemory(avail int64) int64 {
	if avail <= 0 {
		return 1 << 30
	}
	return min(max(avail/4, minKVMemory), maxKVMemory)
}

// defaultDataDir is $XDG_DATA_HOME/kvserve or ~/.local/share/kvserve.
func defaultDataDir(getenv func(string) string) string {
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "kvserve")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "share", "kvserve")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "kvserve")
	}
	return filepath.Join(os.TempDir(), "kvserve")
}

// hostSize is --kv-host-memory: a size, auto (0), or off (-1).
type hostSize int64

func (h *hostSize) String() string {
	switch *h {
	case 0:
		return "auto"
	case -1:
		return "off"
	}
	return formatBytes(int64(*h))
}

func (h *hostSize) Type() string { return "size" }

func (h *hostSize) Set(s string) error {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off", "none", "0":
		*h = -1
		return nil
	}
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*h = hostSize(v)
	return nil
}

// defaultHostMemory is the host tier's budget when not set: twice the KV
// cache, within a quarter of the memory available (it fills only as blocks
// are evicted into it).
func defaultHostMemory(kvMemory, avail int64) int64 {
	if avail <= 0 {
		return kvMemory
	}
	return max(0, min(2*kvMemory, avail/4))
}

// diskTierDir is where the disk KV tier lives in a data directory.
func diskTierDir(dataDir string) string { return filepath.Join(dataDir, "kv") }

// defaultDiskBytes is the disk tier's budget when not set: a tenth of the
// free space, at most 32 GiB (it fills only as blocks leave memory).
func defaultDiskBytes(free int64) int64 { return max(0, min(free/10, 32<<30)) }

func diskTierString(b int64, sim bool, st kv.DiskStats) string {
	switch {
	case b <= 0:
		return "off"
	case sim: // the simulator's pool holds no data: G3 keeps its bookkeeping, reads cost nothing
		return formatBytes(b) + " (simulated: bookkeeping only, no files)"
	}
	return fmt.Sprintf("%s (%d blocks kept from before)", formatBytes(b), st.Blocks)
}

func hostTierString(b int64) string {
	if b <= 0 {
		return "off"
	}
	return formatBytes(b)
}
