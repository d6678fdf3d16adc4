package toolcall

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// SchemaPrinter renders JSON Schema validation messages in English.
var SchemaPrinter = message.NewPrinter(language.English)

// CheckContent checks an answer's content (a JSON object) against the
// question's JSON Schema (MCP's requestedSchema; none accepts any object).
// The schema is the tool's, so it may reference nothing outside itself: no
// loader is installed. Pure computation, so an Update validator may call it.
func CheckContent(schemaJSON, contentJSON string) error {
	content, err := jsonschema.UnmarshalJSON(strings.NewReader(orEmptyObject(contentJSON)))
	if err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	if _, ok := content.(map[string]any); !ok {
		return errors.New("the answer must be a JSON object of the question's fields")
	}
	if strings.TrimSpace(schemaJSON) == "" {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schemaJSON))
	if err != nil {
		return fmt.Errorf("the question's schema cannot be read: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no file or network reference
	const url = "mem://question.json"
	if err := c.AddResource(url, doc); err != nil {
		return fmt.Errorf("the question's schema cannot be read: %w", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return fmt.Errorf("the question's schema cannot be used: %w", err)
	}
	err = sch.Validate(content)
	var ve *jsonschema.ValidationError
	if err == nil {
		return nil
	} else if !errors.As(err, &ve) {
		return fmt.Errorf("the answer does not match the question's schema: %w", err)
	}
	fields := SchemaFieldErrors(ve)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := k
		if name == "" {
			name = "(answer)"
		}
		parts[i] = name + ": " + fields[k]
	}
	return errors.New("the answer does not match the question's schema: " + strings.Join(parts, "; "))
}

// SchemaFieldErrors are a validation error's leaf causes by field path
// ("a.b"; "" for the value itself), several for one field joined by "; ".
// Tool inputs and answers to tools' questions are worded the same way.
func SchemaFieldErrors(ve *jsonschema.ValidationError) map[string]string {
	fields := map[string]string{}
	leafCauses(ve, fields)
	return fields
}

func leafCauses(ve *jsonschema.ValidationError, into map[string]string) {
	if len(ve.Causes) == 0 {
		key := strings.Join(ve.InstanceLocation, ".")
		msg := ve.ErrorKind.LocalizedString(SchemaPrinter)
		if prev, ok := into[key]; ok {
			msg = prev + "; " + msg
		}
		into[key] = msg
		return
	}
	for _, c := range ve.Causes {
		leafCauses(c, into)
	}
}
