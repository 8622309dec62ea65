package chat

import "strings"

// tojsonName is the name under which a Template registers its own tojson
// filter. The jinja library looks filters up among its built-ins first and
// only then among the render's variables, so a template's "| tojson" is
// renamed to this before compiling (rewriteFilters).
const tojsonName = "kvserve_tojson"

// rewriteFilters renames every use of the tojson filter inside {{ }} and
// {% %} tags of src to tojsonName. It leaves text outside tags, comments,
// string literals and {% raw %} blocks alone, and never panics; on an
// unterminated tag it copies the rest unchanged (the compiler then reports
// it).
func rewriteFilters(src string) string {
	if !strings.Contains(src, "tojson") {
		return src
	}
	var b strings.Builder
	b.Grow(len(src) + 64)
	i := 0
	for i < len(src) {
		open := strings.IndexByte(src[i:], '{')
		if open < 0 || i+open+1 >= len(src) {
			b.WriteString(src[i:])
			break
		}
		open += i
		b.WriteString(src[i:open])
		switch src[open+1] {
		case '#':
			end := strings.Index(src[open+2:], "#}")
			if end < 0 {
				b.WriteString(src[open:])
				return b.String()
			}
			end += open + 4
			b.WriteString(src[open:end])
			i = end
		case '{', '%':
			closer := "}}"
			if src[open+1] == '%' {
				closer = "%}"
			}
			end := tagEnd(src, open+2, closer)
			if end < 0 {
				b.WriteString(src[open:])
				return b.String()
			}
			body := src[open+2 : end-2]
			b.WriteString(src[open : open+2])
			b.WriteString(renameTojson(body))
			b.WriteString(closer)
			i = end
			if closer == "%}" && isRawTag(body) {
				// Copy a raw block verbatim up to its {% endraw %}.
				j := i
				for {
					k := strings.Index(src[j:], "{%")
					if k < 0 {
						b.WriteString(src[i:])
						return b.String()
					}
					k += j
					e := tagEnd(src, k+2, "%}")
					if e < 0 {
						b.WriteString(src[i:])
						return b.String()
					}
					if strings.TrimSpace(strings.Trim(src[k+2:e-2], "-+")) == "endraw" {
						b.WriteString(src[i:e])
						i = e
						break
					}
					j = e
				}
			}
		default:
			b.WriteByte('{')
			i = open + 1
		}
	}
	return b.String()
}

// tagEnd returns the index just past closer, scanning from start and skipping
// quoted strings, or -1 when the tag never closes.
func tagEnd(src string, start int, closer string) int {
	for j := start; j < len(src); j++ {
		switch c := src[j]; c {
		case '\'', '"':
			j++
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
		default:
			if strings.HasPrefix(src[j:], closer) {
				return j + len(closer)
			}
		}
	}
	return -1
}

func isRawTag(body string) bool {
	return strings.TrimSpace(strings.Trim(body, "-+")) == "raw"
}

// renameTojson renames filter uses of tojson ("x | tojson", "x|tojson(...)")
// in one tag body, outside string literals.
func renameTojson(body string) string {
	if !strings.Contains(body, "tojson") {
		return body
	}
	var b strings.Builder
	afterPipe := false
	for j := 0; j < len(body); j++ {
		c := body[j]
		switch {
		case c == '\'' || c == '"':
			k := j + 1
			for k < len(body) && body[k] != c {
				if body[k] == '\\' {
					k++
				}
				k++
			}
			k = min(k+1, len(body))
			b.WriteString(body[j:k])
			j = k - 1
			afterPipe = false
		case c == '|':
			b.WriteByte(c)
			afterPipe = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			b.WriteByte(c)
		case afterPipe && strings.HasPrefix(body[j:], "tojson") && !isIdentByte(byteAt(body, j+6)):
			b.WriteString(tojsonName)
			j += len("tojson") - 1
			afterPipe = false
		default:
			b.WriteByte(c)
			afterPipe = false
		}
	}
	return b.String()
}

func byteAt(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
