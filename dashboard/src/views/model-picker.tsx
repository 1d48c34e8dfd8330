import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import type { Report } from '../report.js';

/** The session's sticky model (PUT /sessions/{id}/model), chosen among the models the server serves. */
export function ModelPicker({
  sessionId,
  active,
  report,
}: {
  sessionId: string;
  active: string | null;
  report: Report;
}) {
  const [models, setModels] = useState<string[]>([]);
  const [chosen, setChosen] = useState<string | null>(null);
  useEffect(() => {
    api<{ models: string[] }>('GET', '/models')
      .then((answer) => setModels(answer.models))
      .catch(report);
  }, [report]);
  const current = chosen ?? active;
  const options = current !== null && !models.includes(current) ? [current, ...models] : models;
  return (
    <label class="model-picker">
      Model{' '}
      <select
        value={current ?? ''}
        onChange={async (event) => {
          const model = event.currentTarget.value;
          try {
            await api('PUT', `/sessions/${encodeURIComponent(sessionId)}/model`, { model });
            setChosen(model);
          } catch (error) {
            report(error);
          }
        }}
      >
        {current === null && <option value="">(default)</option>}
        {options.map((model) => (
          <option key={model} value={model}>
            {model}
          </option>
        ))}
      </select>
    </label>
  );
}
