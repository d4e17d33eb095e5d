// Package webhook serves admission and conversion webhooks: typed
// validators and defaulters for any type in a scheme, hub-and-spoke
// conversion for custom resources with several versions, over HTTPS with
// a certificate read from a directory and reloaded when it changes.
//
// A validator answers create, update and delete with the typed object (and
// the old one on update); an error made of field errors is returned to the
// client as the API server returns its own validation (an Invalid status
// whose causes name each field). A defaulter mutates the typed object; the
// server answers with the JSON patch between the object before and after.
// A handler that panics answers 500 and the process goes on; the panic
// and its stack go to the log, not to the client. A malformed review, a
// review of another version than admission.k8s.io/v1 AdmissionReview or
// apiextensions.k8s.io/v1 ConversionReview, a kind the path does not
// serve or an object that does not decode answers 400 naming what is
// wrong.
//
// The listener bounds what a client can hold (Limits, the same for the
// manager's listener and Serve): the handshake and headers, a review's
// body, the whole request and an idle connection each have a timeout, and
// the reviews in flight and the bytes of their bodies are bounded, a
// review beyond either answered 429 with Retry-After. It speaks TLS 1.2
// or later with AEAD suites only. The certificate is read only from a
// directory and files that no other user could have changed, following
// links only inside the directory (as a Secret volume's), from regular
// files of at most 1 MiB; see Options.CertDir.
//
// Paths follow kubebuilder's: /validate-GROUP-VERSION-KIND and
// /mutate-GROUP-VERSION-KIND (dots in the group as dashes, the kind in
// lower case), /convert for every conversion. The webhook configurations
// that point the API server at them are built from what is registered
// (Server.Configurations), so a path, a kind or a resource name can never
// disagree with what the server serves; Install writes them, with the
// CA bundle, and points each converted CRD at /convert.
//
// The manager runs a Server on its own HTTPS listener (manager.Options's
// Webhook, and Manager.Webhooks to register handlers).
package webhook
