package informer

import (
	"maps"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/telemetry"
)

// metrics exports, per handler, its lag (pending keys and the age of the
// oldest) and its panics, read from the listeners when scraped, so the
// event path updates nothing but an atomic counter.
type metrics struct {
	pendingKeys, oldestAge, panics *prometheus.Desc
	cached                         *prometheus.Desc
	warm, snapWrites, snapBytes    *prometheus.Desc
	snapSeconds                    *prometheus.Desc
	collect                        func(ch chan<- prometheus.Metric, m *metrics)
	tel                            telemetry.Telemetry // for Close
}

func newMetrics[T object.Object](tel telemetry.Telemetry, i *SharedIndexInformer[T]) (*metrics, error) {
	if tel.Registerer == nil {
		return nil, nil
	}
	labels := []string{"handler"}
	constant := prometheus.Labels{"informer": i.name}
	m := &metrics{
		pendingKeys: prometheus.NewDesc("ctrlkit_informer_handler_pending_keys",
			"Keys with notifications a handler has not received yet.", labels, constant),
		oldestAge: prometheus.NewDesc("ctrlkit_informer_handler_oldest_pending_seconds",
			"Age of a handler's oldest pending notification.", labels, constant),
		panics: prometheus.NewDesc("ctrlkit_informer_handler_panics_total",
			"Panics recovered from a handler.", labels, constant),
		cached: prometheus.NewDesc("ctrlkit_informer_cached_objects",
			"Objects in the informer's cache.", nil, constant),
		warm: prometheus.NewDesc("ctrlkit_informer_cache_started_warm",
			"1 when the cache started from a snapshot without listing, 0 when it started cold (see the log or /readyz?verbose for why); absent until decided.", nil, constant),
		snapWrites: prometheus.NewDesc("ctrlkit_informer_snapshot_writes_total",
			"Snapshots of the cache written, by result (ok, error).", []string{"result"}, constant),
		snapBytes: prometheus.NewDesc("ctrlkit_informer_snapshot_last_bytes",
			"Size of the last snapshot written.", nil, constant),
		snapSeconds: prometheus.NewDesc("ctrlkit_informer_snapshot_last_write_seconds",
			"Time the last snapshot took to encode, write and sync.", nil, constant),
		collect: func(ch chan<- prometheus.Metric, m *metrics) { i.collect(ch, m) },
		tel:     tel,
	}
	return m, tel.Register(m)
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.pendingKeys
	ch <- m.oldestAge
	ch <- m.panics
	ch <- m.cached
	ch <- m.warm
	ch <- m.snapWrites
	ch <- m.snapBytes
	ch <- m.snapSeconds
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) { m.collect(ch, m) }

func (i *SharedIndexInformer[T]) collect(ch chan<- prometheus.Metric, m *metrics) {
	i.mu.Lock()
	ls := append([]*listener[T](nil), i.listeners...)
	removed := maps.Clone(i.removedPanics)
	i.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(m.cached, prometheus.GaugeValue, float64(i.idx.Len()))
	if i.snap != nil {
		if st := i.CacheStart(); st.Decided {
			warm := 0.0
			if st.Warm {
				warm = 1
			}
			ch <- prometheus.MustNewConstMetric(m.warm, prometheus.GaugeValue, warm)
		}
		sn := i.SnapshotStats()
		ch <- prometheus.MustNewConstMetric(m.snapWrites, prometheus.CounterValue, float64(sn.Writes), "ok")
		ch <- prometheus.MustNewConstMetric(m.snapWrites, prometheus.CounterValue, float64(sn.Failures), "error")
		ch <- prometheus.MustNewConstMetric(m.snapBytes, prometheus.GaugeValue, float64(sn.LastBytes))
		ch <- prometheus.MustNewConstMetric(m.snapSeconds, prometheus.GaugeValue, sn.LastDuration.Seconds())
	}
	// Handlers of one name (a controller with two sources on this
	// informer, as Owns and Watches of one kind) are one series: their
	// pending keys and panics added (removed handlers' panics too, so the
	// counter never goes down), the oldest wait the longest. Two series
	// of one name and labels would fail the whole scrape.
	type handlerLag struct {
		keys, panics float64
		age          time.Duration
	}
	now := time.Now()
	byName := make(map[string]*handlerLag, len(ls))
	var names []string
	for _, l := range ls {
		keys, age := l.lag(now)
		h := byName[l.name]
		if h == nil {
			h = &handlerLag{}
			byName[l.name] = h
			names = append(names, l.name)
		}
		h.keys += float64(keys)
		h.panics += float64(l.panics.Load())
		h.age = max(h.age, age)
	}
	for name, n := range removed {
		if byName[name] == nil {
			byName[name] = &handlerLag{}
			names = append(names, name)
		}
		byName[name].panics += float64(n)
	}
	for _, name := range names {
		h := byName[name]
		ch <- prometheus.MustNewConstMetric(m.pendingKeys, prometheus.GaugeValue, h.keys, name)
		ch <- prometheus.MustNewConstMetric(m.oldestAge, prometheus.GaugeValue, h.age.Seconds(), name)
		ch <- prometheus.MustNewConstMetric(m.panics, prometheus.CounterValue, h.panics, name)
	}
}
