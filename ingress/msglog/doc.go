// Package msglog decides what the ingress's message log writes of the
// bodies that pass through it: which methods' params and results are
// logged ([Log.Logs]), their logged form with the configured members
// hidden at any depth and long bodies cut ([Log.Body]), and an
// invalid-params error about a hidden member with the failed value hidden
// too ([Log.HideFailedValue]). The ingress writes the lines, with each
// call's id, method and trace id (github.com/toolbus/toolbus/ingress.WithMessageLog).
package msglog
