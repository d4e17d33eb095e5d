package main

import (
	"context"
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/webhook"

	webv1 "example.com/website/api/v1"
)

// defaultImage serves a Website that names no image.
const defaultImage = "nginx:1.27"

// Webhooks adds the Website's admission webhooks to m: a Website without
// an image gets defaultImage, its host must be a DNS name, and the host
// cannot change (the directory and the links to the site use it).
func Webhooks(m *manager.Manager) error {
	return errors.Join(
		webhook.AddDefaulter(m.Webhooks(), func(_ context.Context, site *webv1.Website) error {
			if site.Spec.Image == "" {
				site.Spec.Image = defaultImage
			}
			return nil
		}),
		webhook.AddValidator(m.Webhooks(), webhook.Validator[*webv1.Website]{
			Create: func(_ context.Context, site *webv1.Website) (webhook.Warnings, error) { return nil, validHost(site) },
			Update: func(_ context.Context, old, site *webv1.Website) (webhook.Warnings, error) {
				if site.Spec.Host != old.Spec.Host {
					return nil, field.Forbidden(field.NewPath("spec", "host"), "the host of a Website cannot change")
				}
				return nil, nil
			},
		}))
}

func validHost(site *webv1.Website) error {
	if errs := validation.IsDNS1123Subdomain(site.Spec.Host); len(errs) > 0 {
		return field.Invalid(field.NewPath("spec", "host"), site.Spec.Host, strings.Join(errs, "; "))
	}
	return nil
}
