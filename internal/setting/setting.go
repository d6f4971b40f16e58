// Package setting gives the components' Config types one form: a
// setDefaults that sets each zero field to its default with [Default],
// and a validate that lists the rules of its fields and reports the first
// one broken with [Check], as "<component>: <field> <value>: <rule>".
// The environment is mapped to these Config types in one place
// (internal/stack and internal/conns); each Config owns its defaults and
// its checks.
package setting

import (
	"fmt"
	"strconv"
	"strings"
)

// Default sets *v to def when *v is the zero value of its type.
func Default[T comparable](v *T, def T) { *v = Or(*v, def) }

// Or returns v, or def when v is the zero value of its type.
func Or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Rule is one condition a Config field must meet.
type Rule struct {
	// Field names the field, as the Config spells it.
	Field string
	// Value is the field's value, printed in the error.
	Value any
	// OK says whether the field meets the rule.
	OK bool
	// Want says what the field must be: "must not be negative".
	Want string
}

// Number is the type of a numeric setting.
type Number interface {
	~int | ~int32 | ~int64 | ~float64
}

// NotNegative is the rule that v is 0 or more.
func NotNegative[T Number](field string, v T) Rule {
	return Rule{Field: field, Value: v, OK: v >= 0, Want: "must not be negative"}
}

// AtLeast is the rule that v is least or more.
func AtLeast[T Number](field string, v, least T) Rule {
	return Rule{Field: field, Value: v, OK: v >= least, Want: fmt.Sprintf("must be at least %v", least)}
}

// ConsumerName is the rule that v can name a JetStream consumer: no '.',
// '*', '>' or white space.
func ConsumerName(field, v string) Rule {
	return Rule{Field: field, Value: strconv.Quote(v), OK: !strings.ContainsAny(v, ".*> \t\r\n"),
		Want: "must not contain '.', '*', '>' or white space"}
}

// Check returns the error of the first rule broken, "<component>: <field>
// <value>: <want>", or nil when every rule holds.
func Check(component string, rules ...Rule) error {
	for _, r := range rules {
		if !r.OK {
			return fmt.Errorf("%s: %s %v: %s", component, r.Field, r.Value, r.Want)
		}
	}
	return nil
}
