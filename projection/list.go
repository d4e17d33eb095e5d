package projection

import "fmt"

// List is one page of a list response (a PodList for a Pod plan), its
// items decoded as projections.
type List[P any] struct {
	// ResourceVersion and Continue are the list's metadata: where a watch
	// starts, and the token of the next page ("" on the last).
	ResourceVersion, Continue string
	Items                     []P
}

// DecodeList decodes the protobuf encoding of a list of F (metadata 1 as
// metav1.ListMeta, items 2, as every generated list type sends them: the
// raw bytes inside the envelope) into a List of projections. The items are
// allocated once, counted first.
func (p *Plan[P]) DecodeList(data []byte) (List[P], error) {
	if p.jsonOnly {
		return List[P]{}, ErrNoProtobuf
	}
	list := List[P]{Items: make([]P, 0, count(data, 0, 2))}
	err := fields(data, p.root.path+"List", func(num uint64, v []byte) error {
		switch num {
		case 1:
			return fields(v, p.root.path+"List.metadata", func(num uint64, v []byte) error {
				if num == 2 {
					list.ResourceVersion = string(v)
				} else if num == 3 {
					list.Continue = string(v)
				}
				return nil
			})
		case 2:
			item, err := p.Decode(v)
			if err != nil {
				return fmt.Errorf("item %d: %w", len(list.Items), err)
			}
			list.Items = append(list.Items, item)
		}
		return nil
	})
	return list, err
}
