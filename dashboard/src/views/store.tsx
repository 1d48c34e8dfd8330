import type { StoreStats } from '../api.js';
import { bytes } from '../format.js';
import { offline, usePolled } from '../hooks.js';
import type { Report } from '../report.js';
import { UsagePanel } from './usage.js';

/** `metis trace stats` as a page, with the events stored per hour as a chart. */
export function StoreView({ report }: { report: Report }) {
  const { data, error } = usePolled<StoreStats>('/store/stats', 10_000, report);
  return (
    <>
      <h1 class="page-title">Usage and store</h1>
      <UsagePanel report={report} />
      <section aria-labelledby="store-title">
        <h2 id="store-title">Trace store</h2>
        {offline(error) && (
          <p class="banner warn" role="status">
            {offline(error)}
          </p>
        )}
        {data === null ? (
          <p>Loading…</p>
        ) : (
          <>
            <dl class="figures" data-testid="store-figures">
              <div>
                <dt>Events</dt>
                <dd>{data.event_count.toLocaleString()}</dd>
              </div>
              <div>
                <dt>Sessions</dt>
                <dd>{data.session_count.toLocaleString()}</dd>
              </div>
              <div>
                <dt>File</dt>
                <dd>{bytes(data.file_bytes)}</dd>
              </div>
              <div>
                <dt>WAL</dt>
                <dd>{bytes(data.wal_bytes)}</dd>
              </div>
              <div>
                <dt>Oldest event</dt>
                <dd>{data.oldest_event_timestamp?.slice(0, 16).replace('T', ' ') ?? '–'}</dd>
              </div>
              <div>
                <dt>Retention</dt>
                <dd>{data.retention_days} days</dd>
              </div>
            </dl>
            <p class="muted">
              {data.db_path} (schema {data.schema_version})
            </p>
            <h2>Events per hour</h2>
            <HourChart hours={data.by_hour} />
            <h2>Events by type</h2>
            <table class="by-type">
              <thead>
                <tr>
                  <th scope="col">Type</th>
                  <th scope="col" class="num">
                    Events
                  </th>
                </tr>
              </thead>
              <tbody>
                {data.by_type.map((row) => (
                  <tr key={row.type}>
                    <td>{row.type}</td>
                    <td class="num">{row.count.toLocaleString()}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </>
        )}
      </section>
    </>
  );
}

function HourChart({ hours }: { hours: StoreStats['by_hour'] }) {
  if (hours.length === 0) return <p class="muted">No events stored yet.</p>;
  const peak = Math.max(...hours.map((hour) => hour.count));
  const width = 720;
  const height = 160;
  const bar = width / hours.length;
  return (
    <svg class="chart" viewBox={`0 0 ${width} ${height + 20}`} role="img" aria-label="Events stored per hour">
      {hours.map((hour, index) => {
        const h = Math.max(1, (hour.count / peak) * height);
        return (
          <rect key={hour.hour} x={index * bar + 1} y={height - h} width={Math.max(1, bar - 2)} height={h}>
            <title>
              {hour.hour}:00 UTC: {hour.count.toLocaleString()} events
            </title>
          </rect>
        );
      })}
      <text x={0} y={height + 16}>
        {hours[0]!.hour}:00
      </text>
      <text x={width} y={height + 16} text-anchor="end">
        {hours.at(-1)!.hour}:00 UTC
      </text>
    </svg>
  );
}
