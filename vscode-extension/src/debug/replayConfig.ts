/**
 * The debug configuration that replays an incident bundle. Re-running a step needs the user's
 * model and optimizer, which only their program builds, so the replay runs that program under
 * `tensor-dap run --replay BUNDLE`: at the program's first optimizer step (a loop updating its
 * parameters by hand: its first backward()) tensor_dap re-runs the bundle's step on them and stops
 * where the NaN was born, then the program ends.
 * The program comes from the report (`program`, `args`, when the writer records them), else
 * from the user. `trust`: the bundle keeps objects of the program's own classes (`objects.pt`),
 * which only `--trust` unpickles; the caller asks the user first.
 */
import type { IncidentReport } from '../parsers/incident';
import type { LaunchConfig } from './launchTemplates';

export function replayConfiguration(bundleDir: string, report: IncidentReport, program: string, cwd: string, trust = false): LaunchConfig {
    const name = bundleDir.split(/[\\/]/).filter(Boolean).pop() ?? bundleDir;
    const programArgs = report.program === program ? (report.args ?? []) : [];
    return {
        name: `Replay incident ${name}`,
        type: 'debugpy',
        request: 'launch',
        module: 'tensor_dap',
        args: ['run', '--replay', bundleDir, ...(trust ? ['--trust'] : []), program, ...programArgs],
        cwd,
        console: 'integratedTerminal',
        justMyCode: false,
    };
}
