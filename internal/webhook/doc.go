// Package webhook sends the HTTP POSTs toolbus makes to URLs its callers
// name: the completion callbacks of jobs and the push notifications of
// A2A tasks. It is the one outbound webhook sender; each caller brings
// only its body, its headers and its way of signing.
//
// A [Sender] POSTs through an [egress.Guard], so that no attempt reaches
// an address the operator did not allow (loopback, private, link-local
// and the rest of [egress.Denied]), redirects included; it follows no
// redirect (a 3xx answer is a failure of class "status 302" and the
// like), uses no proxy, bounds each attempt in time ([WithTimeout]) and
// reads at most [MaxAnswerBytes] of an answer.
//
// A [Delivery] is one body for one URL. [Sender.Deliver] makes its
// attempts: each is signed afresh by the delivery's [Signer] at the time
// it is sent ([HMAC] is the scheme of job callbacks; an A2A push carries
// its config's token and credentials as plain headers and needs none),
// and each is reported ([Attempt]) with its failure reduced to an
// [egress.Class], which holds no word of the receiver and may be shown to
// the caller that named the URL. Between attempts it waits as its
// [Retry] says, doubling from Min to at most Max.
//
// A failure is retried while the retry allows attempts; once they are
// spent the delivery has failed for good, and Deliver returns the last
// attempt's error. A delivery whose wait between attempts is given up
// ([Delivery.Wait], or its context ending) is stopped, not failed
// ([ErrStopped]): its caller may hand it to another process, which goes
// on from the attempts made ([Delivery.Tried]).
package webhook
