package market

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxQueryLen is the longest catalogue query accepted, in characters.
const MaxQueryLen = 1000

// Token is one word of a catalogue query as written.
type Token struct {
	Text string
	// Pos is the 1-based character position of the token in the query, or
	// 0 for a token that did not come from a query (a filter form field).
	Pos int
}

// Condition is one comparison of a catalogue query as written: a field, an
// operator and a value, or a list of values for "in" and "not in". It
// says nothing yet about what the words mean; CompileSearch does.
type Condition struct {
	Field Token
	// Op is one of =, !=, <, <=, >, >=, in, not in; its Pos is where the
	// operator was written.
	Op     Token
	Values []Token
}

// NewCondition is a condition that did not come from a query, such as one
// field of the catalogue's filter form: its tokens have no position.
func NewCondition(field, op string, values ...string) Condition {
	c := Condition{Field: Token{Text: field}, Op: Token{Text: op}}
	for _, v := range values {
		c.Values = append(c.Values, Token{Text: v})
	}
	return c
}

// String writes the condition back as query text, quoting values that
// need it: ParseQuery reads it back to the same condition.
func (c Condition) String() string {
	vals := make([]string, len(c.Values))
	for i, v := range c.Values {
		vals[i] = quoteQueryValue(v.Text)
	}
	if c.Op.Text == "in" || c.Op.Text == "not in" {
		return c.Field.Text + " " + c.Op.Text + " (" + strings.Join(vals, ", ") + ")"
	}
	return c.Field.Text + c.Op.Text + strings.Join(vals, "")
}

// FormatQuery writes conditions as one line of query text.
func FormatQuery(conds []Condition) string {
	parts := make([]string, len(conds))
	for i, c := range conds {
		parts[i] = c.String()
	}
	return strings.Join(parts, " ")
}

func quoteQueryValue(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || isQueryPunct(r) }) &&
		!isQueryKeyword(s) {
		return s
	}
	if !strings.Contains(s, `"`) {
		return `"` + s + `"`
	}
	return "'" + s + "'"
}

// The query language. A query is conditions separated by spaces (or
// "and"), all of which must hold:
//
//	query     = [ condition { [ "and" ] condition } ]
//	condition = field op value | field [ "not" ] "in" "(" value { "," value } ")"
//	op        = "=" | "==" | ":" | "!=" | "<" | "<=" | ">" | ">="
//	value     = word | '"' text '"' | "'" text "'"
//
// A word is a run of characters other than spaces, quotes and ( ) , = ! < > :.
// Keywords (and, or, in, not) are case-insensitive. Which fields exist and
// what their values mean is CompileSearch's business, but the parser knows
// the field names so that "H100 devices>=8" is caught at "H100".

type lexKind int

const (
	lexEOF lexKind = iota
	lexWord
	lexString
	lexOp
	lexLParen
	lexRParen
	lexComma
)

type lexeme struct {
	kind lexKind
	text string // the word, the quoted text without quotes, or the operator
	pos  int    // 1-based character position
}

func isQueryPunct(r rune) bool {
	switch r {
	case '(', ')', ',', '=', '!', '<', '>', ':', '"', '\'':
		return true
	}
	return false
}

func isQueryKeyword(s string) bool {
	for _, k := range []string{"and", "or", "in", "not"} {
		if strings.EqualFold(s, k) {
			return true
		}
	}
	return false
}

// lexQuery splits a query into lexemes, ending with one lexEOF.
func lexQuery(s string) ([]lexeme, error) {
	var out []lexeme
	rs := []rune(s)
	for i := 0; i < len(rs); {
		r, pos := rs[i], i+1
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '(':
			out, i = append(out, lexeme{lexLParen, "(", pos}), i+1
		case r == ')':
			out, i = append(out, lexeme{lexRParen, ")", pos}), i+1
		case r == ',':
			out, i = append(out, lexeme{lexComma, ",", pos}), i+1
		case r == '=' || r == ':':
			n := 1
			if r == '=' && i+1 < len(rs) && rs[i+1] == '=' {
				n = 2
			}
			out, i = append(out, lexeme{lexOp, "=", pos}), i+n
		case r == '!':
			if i+1 >= len(rs) || rs[i+1] != '=' {
				return nil, queryErr(Token{Text: "!", Pos: pos}, `!= ("!" alone is not an operator)`)
			}
			out, i = append(out, lexeme{lexOp, "!=", pos}), i+2
		case r == '<' || r == '>':
			op := string(r)
			if i+1 < len(rs) && rs[i+1] == '=' {
				op += "="
			}
			out, i = append(out, lexeme{lexOp, op, pos}), i+len(op)
		case r == '"' || r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != r {
				j++
			}
			if j == len(rs) {
				return nil, queryErr(Token{Text: string(rs[i:]), Pos: pos}, "a closing "+string(r)+" for the quote opened here")
			}
			out, i = append(out, lexeme{lexString, string(rs[i+1 : j]), pos}), j+1
		default:
			j := i
			for j < len(rs) && !unicode.IsSpace(rs[j]) && !isQueryPunct(rs[j]) {
				j++
			}
			out, i = append(out, lexeme{lexWord, string(rs[i:j]), pos}), j
		}
	}
	return append(out, lexeme{lexEOF, "", len(rs) + 1}), nil
}

// ParseQuery reads a catalogue query into its conditions. A query that
// does not read gets an invalid *Error whose message names the character
// position, the token found there and what was expected instead; the
// same message is under Fields["q"]. The empty query has no conditions.
func ParseQuery(s string) ([]Condition, error) {
	if n := utf8.RuneCountInString(s); n > MaxQueryLen {
		rs := []rune(s)
		return nil, queryErr(Token{Text: string(rs[MaxQueryLen:]), Pos: MaxQueryLen + 1},
			fmt.Sprintf("the query to end: a query has at most %d characters", MaxQueryLen))
	}
	lx, err := lexQuery(s)
	if err != nil {
		return nil, err
	}
	p := queryParser{lx: lx}
	var out []Condition
	for p.peek().kind != lexEOF {
		if len(out) > 0 && p.isWord("and") {
			p.next()
			if p.peek().kind == lexEOF {
				return nil, p.errAt(p.peek(), "a condition after “and”")
			}
		}
		if p.isWord("or") {
			return nil, p.errAt(p.peek(), "a condition: every condition must hold, so there is no “or”; list alternatives with in (…), e.g. family in (H100, H200)")
		}
		c, err := p.condition()
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

type queryParser struct {
	lx []lexeme
	i  int
}

func (p *queryParser) peek() lexeme { return p.lx[p.i] }

func (p *queryParser) next() lexeme {
	l := p.lx[p.i]
	if l.kind != lexEOF {
		p.i++
	}
	return l
}

func (p *queryParser) isWord(w string) bool {
	l := p.peek()
	return l.kind == lexWord && strings.EqualFold(l.text, w)
}

func (p *queryParser) errAt(l lexeme, expected string) error {
	if l.kind == lexEOF {
		return queryErrEnd(l.pos, expected)
	}
	return queryErr(Token{Text: l.text, Pos: l.pos}, expected)
}

func (p *queryParser) condition() (Condition, error) {
	l := p.next()
	if l.kind != lexWord {
		return Condition{}, p.errAt(l, "a field name, e.g. devices, family, memory or price")
	}
	f, ok := findQueryField(l.text)
	if !ok {
		return Condition{}, p.errAt(l, unknownFieldExpected(l.text))
	}
	c := Condition{Field: Token{Text: l.text, Pos: l.pos}}
	op := p.next()
	switch {
	case op.kind == lexOp:
		c.Op = Token{Text: op.text, Pos: op.pos}
	case op.kind == lexWord && strings.EqualFold(op.text, "in"):
		c.Op = Token{Text: "in", Pos: op.pos}
	case op.kind == lexWord && strings.EqualFold(op.text, "not"):
		if !p.isWord("in") {
			return Condition{}, p.errAt(p.peek(), "“in” after “not”")
		}
		p.next()
		c.Op = Token{Text: "not in", Pos: op.pos}
	default:
		return Condition{}, p.errAt(op, "an operator after "+l.text+": "+f.ops())
	}
	if c.Op.Text != "in" && c.Op.Text != "not in" {
		v, err := p.value(f, c)
		if err != nil {
			return Condition{}, err
		}
		c.Values = []Token{v}
		return c, nil
	}
	if open := p.next(); open.kind != lexLParen {
		return Condition{}, p.errAt(open, "“(” to open the list after "+c.Field.Text+" "+c.Op.Text+", e.g. "+f.listExample())
	}
	for {
		v, err := p.value(f, c)
		if err != nil {
			return Condition{}, err
		}
		c.Values = append(c.Values, v)
		if len(c.Values) > 100 {
			return Condition{}, p.errAt(p.lx[p.i-1], "at most 100 values in one list")
		}
		switch sep := p.next(); sep.kind {
		case lexComma:
			continue
		case lexRParen:
			return c, nil
		default:
			return Condition{}, p.errAt(sep, "“,” and another value, or “)” to close the list opened at character "+fmt.Sprint(c.Op.Pos))
		}
	}
}

func (p *queryParser) value(f queryField, c Condition) (Token, error) {
	v := p.next()
	if v.kind != lexWord && v.kind != lexString {
		return Token{}, p.errAt(v, f.expected+" after "+c.Field.Text+" "+c.Op.Text)
	}
	return Token{Text: v.text, Pos: v.pos}, nil
}

// unknownFieldExpected is what to say when a word is not a field: a hint
// when the word is a value of some field (a bare "H100").
func unknownFieldExpected(word string) string {
	names := make([]string, len(queryFields))
	for i, f := range queryFields {
		names[i] = f.name
	}
	list := strings.Join(names, ", ")
	for _, f := range queryFields {
		if f.resolve != nil {
			if _, ok := f.resolve(word); ok {
				return fmt.Sprintf("a field name before the value, e.g. %s=%s (fields: %s)", f.name, quoteQueryValue(word), list)
			}
		}
	}
	return "a field name: " + list
}

// queryErr is the invalid error for a token: with its position when it
// came from a query, as a form field's message when it did not.
func queryErr(t Token, expected string) error {
	shown := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, t.Text)
	if rs := []rune(shown); len(rs) > 40 {
		shown = string(rs[:40]) + "…"
	}
	var msg string
	if t.Pos > 0 {
		msg = fmt.Sprintf("At character %d, “%s”: expected %s.", t.Pos, shown, expected)
	} else {
		msg = fmt.Sprintf("Expected %s, not “%s”.", expected, shown)
	}
	return &Error{Code: CodeInvalid, Message: msg, Fields: map[string]string{"q": msg}}
}

func queryErrEnd(pos int, expected string) error {
	msg := fmt.Sprintf("At character %d, the end of the query: expected %s.", pos, expected)
	return &Error{Code: CodeInvalid, Message: msg, Fields: map[string]string{"q": msg}}
}
