// Package options applies functional options to a part's config, the one
// loop that each part's New and CheckOptions share.
package options

// Apply applies opts to cfg in order and returns the result, or the
// first option's refusal with cfg as it was then.
func Apply[C any, O ~func(*C) error](cfg C, opts []O) (C, error) {
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}
