/**
 * Every message between the extension host and its webviews, in one place. Both sides import
 * these types (the webview scripts are bundled from ../../ui), so a change shows up as a type
 * error on whichever side was not updated. Types only: nothing here runs.
 */
import type { TensorDetail } from '../debug/inspectorModel';
import type { ImportSplit } from '../parsers/importSplit';
import type { IncidentReport } from '../parsers/incident';
import type { LprofFunction } from '../parsers/lprof';
import type { MemoryReport } from '../parsers/memory';
import type { TraceSummary } from '../parsers/trace';
import type { IcicleNode, ProfTable, Relative } from '../views/profView';

/** A function of a line profile, with the source lines the host could read (null: not found). */
export interface LprofView extends LprofFunction {
    source: string[] | null;   // text of lines [first line of the function .. its last profiled line]
    sourceFirst: number;       // line number of source[0]
}

export type ErrorAction = 'reopenAsText' | 'retry' | 'openSettings';

export type HostMessage =
    | { type: 'loading'; what: string }
    | { type: 'error'; title: string; message: string; detail?: string; actions: ErrorAction[] }
    | { type: 'prof'; fileName: string; table: ProfTable; loadMs: number }
    | { type: 'icicle'; nodes: IcicleNode[] }
    | { type: 'imports'; split: ImportSplit | null }   // null: no estimate (no tensor_dap in the selected Python)
    | { type: 'relatives'; id: number; callers: Relative[]; callees: Relative[] }
    | { type: 'lprof'; fileName: string; unit: number; functions: LprofView[]; decorations: boolean }
    | { type: 'trace'; fileName: string; summary: TraceSummary; loadMs: number; bytes: number }
    | { type: 'memory'; fileName: string; report: MemoryReport }
    | { type: 'incident'; bundle: string; report: IncidentReport }
    | { type: 'tensor'; name: string; expr: string; frame: string; detail: TensorDetail };

export type WebviewMessage =
    | { type: 'ready' }
    | { type: 'openSource'; file: string; line: number }
    | { type: 'relatives'; id: number }
    | { type: 'icicle'; withoutImports: boolean }
    | { type: 'imports' }
    | { type: 'action'; action: ErrorAction }
    | { type: 'showLineProfile'; file: string; line: number }
    | { type: 'replay' }
    | { type: 'refreshTensor' };
