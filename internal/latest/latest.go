// Package latest keeps the newest value in a channel of one: a reader that
// falls behind gets the latest value, never a backlog, and a writer never
// blocks.
package latest

// Offer puts v in ch, a channel of capacity one, replacing a value not yet
// read. Writers may offer concurrently: a value is then dropped, never
// waited on.
func Offer[T any](ch chan T, v T) {
	for range 2 {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
