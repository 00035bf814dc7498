package schema

import (
	"fmt"
	"strings"
)

// MatchMethod reports whether method matches pattern, a method name whose
// tokens may also be '*' (any one token) or, last, '>' (one or more
// tokens): "math.*" matches math.add but not math.vec.add, "math.>"
// matches both, ">" matches every method. These are the patterns a worker
// serves and an operator writes in allow lists.
func MatchMethod(pattern, method string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		mt, mrest, mmore := strings.Cut(method, ".")
		if pt == ">" && !pmore {
			return mt != ""
		}
		if pt != "*" && pt != mt {
			return false
		}
		if !pmore || !mmore {
			return pmore == mmore
		}
		pattern, method = prest, mrest
	}
}

// CoversPattern reports whether pattern matches every method that other,
// a method name or a pattern, matches: "math.*" covers "math.*" and
// math.add but not "math.>", ">" covers everything. For a method name
// other it is [MatchMethod]. It tells whether an allow list lets a caller
// call every method a worker's pattern serves.
func CoversPattern(pattern, other string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		ot, orest, omore := strings.Cut(other, ".")
		if pt == ">" && !pmore {
			return ot != ""
		}
		if ot == ">" && !omore {
			return false // one or more tokens, which only '>' covers
		}
		if pt != "*" && pt != ot {
			return false
		}
		if !pmore || !omore {
			return pmore == omore
		}
		pattern, other = prest, orest
	}
}

// OverlapPatterns reports whether some method name matches both a and b,
// each a method name or a pattern of [MatchMethod]: "*.add" and "math.*"
// overlap (math.add), "math.*" and "math.>" too (math.add), "math.*" and
// "math.add.int" do not. It tells whether two patterns would share calls.
func OverlapPatterns(a, b string) bool {
	for {
		at, arest, amore := strings.Cut(a, ".")
		bt, brest, bmore := strings.Cut(b, ".")
		if (at == ">" && !amore) || (bt == ">" && !bmore) {
			// The other has a token here, so it has the one or more
			// tokens '>' needs, whatever follows.
			return true
		}
		if at != "*" && bt != "*" && at != bt {
			return false
		}
		if !amore || !bmore {
			return amore == bmore
		}
		a, b = arest, brest
	}
}

// ValidatePattern checks a pattern of [MatchMethod]: tokens of the method
// grammar, '*', or a last '>'.
func ValidatePattern(pattern string) error {
	if err := validatePattern(pattern); err != nil {
		return fmt.Errorf("schema: invalid method pattern %q: %w", pattern, err)
	}
	return nil
}

// validatePattern is [ValidatePattern] with the grammar's own error.
func validatePattern(pattern string) error {
	tokens := strings.Split(pattern, ".")
	concrete := make([]string, len(tokens))
	for i, t := range tokens {
		switch {
		case t == "*", t == ">" && i == len(tokens)-1:
			concrete[i] = "x"
		default:
			concrete[i] = t
		}
	}
	return ValidateMethod(strings.Join(concrete, "."))
}
