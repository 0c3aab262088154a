package schemagen

import (
	"math/rand"
	"regexp/syntax"
	"unicode/utf8"
)

// matching draws strings a regular expression matches, at most budget runes long. Anchors
// emit nothing (every pattern of a CRD is matched as a whole or anchored). With fill, every
// repetition takes as much of the budget as it can, so that the longest strings the pattern
// and the length limit allow together are drawn; otherwise repetitions stay short.
type matching struct {
	r    *rand.Rand
	fill bool
}

func compile(pattern string) (*syntax.Regexp, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, err
	}
	return re.Simplify(), nil
}

func (m matching) draw(re *syntax.Regexp, budget int) []rune {
	var out []rune
	m.emit(re, budget, &out)
	return out
}

func (m matching) emit(re *syntax.Regexp, budget int, out *[]rune) {
	switch re.Op {
	case syntax.OpLiteral:
		*out = append(*out, re.Rune...)
	case syntax.OpCharClass:
		*out = append(*out, m.fromClass(re.Rune))
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		*out = append(*out, rune(0x21+m.r.Intn(0x5e)))
	case syntax.OpCapture:
		m.emit(re.Sub[0], budget, out)
	case syntax.OpConcat:
		rest := 0
		for _, s := range re.Sub {
			rest += minRunes(s)
		}
		for _, s := range re.Sub {
			rest -= minRunes(s)
			before := len(*out)
			m.emit(s, budget-rest, out)
			budget -= len(*out) - before
		}
	case syntax.OpAlternate:
		var fit []*syntax.Regexp
		for _, s := range re.Sub {
			if minRunes(s) <= budget {
				fit = append(fit, s)
			}
		}
		if len(fit) > 0 {
			m.emit(fit[m.r.Intn(len(fit))], budget, out)
		}
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := repeatBounds(re)
		sub, each := re.Sub[0], max(minRunes(re.Sub[0]), 1)
		n := lo + m.r.Intn(3)
		if m.fill || m.r.Intn(8) == 0 {
			n = budget // as many as fit: bounded below
		}
		if hi >= 0 {
			n = min(n, hi)
		}
		for i := 0; i < n; i++ {
			// The repetitions still owed after this one keep their minimum.
			owed := max(lo-i-1, 0) * minRunes(sub)
			if i >= lo && budget-owed < each {
				break
			}
			before := len(*out)
			m.emit(sub, budget-owed, out)
			used := len(*out) - before
			budget -= used
			if used == 0 && i >= lo {
				break
			}
		}
	}
}

func repeatBounds(re *syntax.Regexp) (lo, hi int) {
	switch re.Op {
	case syntax.OpStar:
		return 0, -1
	case syntax.OpPlus:
		return 1, -1
	case syntax.OpQuest:
		return 0, 1
	}
	return re.Min, re.Max
}

// fromClass draws one rune of a character class (pairs of inclusive ranges), a valid one
// outside the surrogates.
func (m matching) fromClass(ranges []rune) rune {
	for {
		i := 2 * m.r.Intn(len(ranges)/2)
		lo, hi := ranges[i], ranges[i+1]
		if hi > lo+0x7f && m.r.Intn(2) == 0 { // wide (negated) classes: printable ASCII half the time
			hi = min(hi, max(lo, 0x7e))
		}
		c := lo + rune(m.r.Int63n(int64(hi-lo)+1))
		if utf8.ValidRune(c) && c != 0 {
			return c
		}
	}
}

// minRunes is the length of the shortest string re matches.
func minRunes(re *syntax.Regexp) int {
	switch re.Op {
	case syntax.OpLiteral:
		return len(re.Rune)
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1
	case syntax.OpCapture:
		return minRunes(re.Sub[0])
	case syntax.OpConcat:
		n := 0
		for _, s := range re.Sub {
			n += minRunes(s)
		}
		return n
	case syntax.OpAlternate:
		n := -1
		for _, s := range re.Sub {
			if k := minRunes(s); n < 0 || k < n {
				n = k
			}
		}
		return max(n, 0)
	case syntax.OpPlus:
		return minRunes(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min * minRunes(re.Sub[0])
	}
	return 0
}
