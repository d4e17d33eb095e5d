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
// A handler that panics answers 500 with the panic's message and the
// process goes on; a malformed review, a kind the path does not serve or
// an object that does not decode answers 400 naming what is wrong.
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
