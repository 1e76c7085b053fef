/**
 * The debug configuration that replays an incident bundle. Re-running a step needs the user's
 * model and step function, which only their program builds, so the replay runs that program
 * with TENSOR_DAP_REPLAY naming the bundle; tensor_dap's `watch` is to notice it, replay the
 * bundle's step at its first `w.step(...)` and stop where the NaN was born (see the README).
 * The program comes from the report (`program`, `args`, when the writer records them), else
 * from the user.
 */
import type { IncidentReport } from '../parsers/incident';
import type { LaunchConfig } from './launchTemplates';

export const REPLAY_ENV = 'TENSOR_DAP_REPLAY';

export function replayConfiguration(bundleDir: string, report: IncidentReport, program: string, cwd: string): LaunchConfig {
    const name = bundleDir.split(/[\\/]/).filter(Boolean).pop() ?? bundleDir;
    return {
        name: `Replay incident ${name}`,
        type: 'debugpy',
        request: 'launch',
        program,
        args: report.program === program ? (report.args ?? []) : [],
        cwd,
        env: { [REPLAY_ENV]: bundleDir },
        console: 'integratedTerminal',
        justMyCode: false,
    };
}
