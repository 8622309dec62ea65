package servebench

import (
	"math"
	"math/rand/v2"
	"strings"
)

// TokensPerWord is the assumed number of tokens per generated word
// (including its space and the odd punctuation mark): about what byte-level
// BPE tokenizers of current models give for common English words. The
// server's usage.prompt_tokens reports the true count; workloads only aim at
// their token sizes through this ratio.
const TokensPerWord = 1.3

// words is the vocabulary of the synthetic texts: common English words, so
// that real tokenizers see ordinary text.
var words = strings.Fields(`
the of and to in is was for on that with as by at from this be are it an or
which have has had not but were their they all can more one would will there
been other when its who also into time than only new some could these two may
first then do any like my now over such our man me even most made after many
before must through back years where much your way well down should because
each just those people how too little state good very make world still own see
men work long get here between both life being under never day same another
know while last might us great old year off come since against go came right
used take three states himself few house use during without again place around
however home small found thought went say part once general high upon school
every does got united left number course war until always away something fact
though water less public put think almost hand enough far took head yet
government system better set told nothing night end why called didn't eyes
find going look asked later knew point next city business give group toward
young days let room president side social given present several order national
possible rather second face per among form important often things looked early
white case john become large big need four within felt along children saw best
church ever least power development light thing seemed family interest want
members mind country area others done turned although open problem god service
certain kind began different door thus help means sense whole matter perhaps
itself york times law human line above name example action company hands local
show whether five history gave today either act feet across taken past quite
anything seen having death experience body word half really week field am car
words already information tell together college shall money period held keep
sure probably free seems political real behind cannot miss clear question
program air making job south fiscal market model cache block token server
request memory latency prefix stream agent session queue worker engine router
tenant value result error file path query table index record batch shard
`)

// textGen writes synthetic text from a seeded source.
type textGen struct {
	rng *rand.Rand
}

// wordsFor is the number of words that make about n tokens.
func wordsFor(n int) int {
	if n <= 0 {
		return 0
	}
	return max(1, int(math.Round(float64(n)/TokensPerWord)))
}

// sentences appends about n tokens of prose to b: sentences of 6–20 words,
// capitalised, ending in a full stop.
func (g textGen) sentences(b *strings.Builder, n int) {
	left := wordsFor(n)
	for left > 0 {
		k := min(left, 6+g.rng.IntN(15))
		left -= k
		for i := range k {
			w := words[g.rng.IntN(len(words))]
			if i == 0 {
				if b.Len() > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(strings.ToUpper(w[:1]))
				b.WriteString(w[1:])
				continue
			}
			b.WriteByte(' ')
			b.WriteString(w)
			if i < k-1 && g.rng.IntN(12) == 0 {
				b.WriteByte(',')
			}
		}
		b.WriteByte('.')
	}
}

// text returns about n tokens of prose.
func (g textGen) text(n int) string {
	var b strings.Builder
	g.sentences(&b, n)
	return b.String()
}

// word returns one random word.
func (g textGen) word() string { return words[g.rng.IntN(len(words))] }
