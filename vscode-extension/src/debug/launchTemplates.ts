/**
 * tensor_dap's launch.json templates (the single source is tensor_dap/dap/launch_templates.json,
 * copied into the extension by the build) and their merge into an existing launch.json that
 * keeps its comments, formatting and configurations: only configurations whose name is missing
 * are appended, with the `inputs` entries they reference.
 */
import { findNodeAtLocation, Node, parse, ParseError, parseTree, printParseErrorCode } from 'jsonc-parser';

export interface LaunchConfig {
    name: string;
    type: string;
    request: string;
    [key: string]: unknown;
}

export interface LaunchInput {
    id: string;
    [key: string]: unknown;
}

export interface Templates {
    configurations: LaunchConfig[];
    inputs: LaunchInput[];
}

export class LaunchJsonError extends Error {}

export function parseTemplates(text: string): Templates {
    const data = JSON.parse(text) as { version?: unknown; configurations?: unknown; inputs?: unknown };
    if (data.version !== 1 || !Array.isArray(data.configurations)) {
        throw new LaunchJsonError('launch_templates.json: expected version 1 with a configurations list');
    }
    for (const c of data.configurations as LaunchConfig[]) {
        if (typeof c.name !== 'string' || typeof c.type !== 'string' || typeof c.request !== 'string') {
            throw new LaunchJsonError('launch_templates.json: every configuration needs name, type and request');
        }
    }
    return { configurations: data.configurations as LaunchConfig[], inputs: Array.isArray(data.inputs) ? data.inputs as LaunchInput[] : [] };
}

export function template(templates: Templates, name: string): LaunchConfig {
    const found = templates.configurations.find((c) => c.name === name);
    if (!found) {
        throw new LaunchJsonError(`launch_templates.json has no configuration named ${JSON.stringify(name)}`);
    }
    return JSON.parse(JSON.stringify(found)) as LaunchConfig;
}

/** The ${input:ID} ids a configuration uses. */
export function inputIds(config: unknown): string[] {
    const ids = new Set<string>();
    for (const m of JSON.stringify(config).matchAll(/\$\{input:([^}]+)\}/g)) {
        ids.add(m[1]);
    }
    return [...ids];
}

export interface MergeResult {
    text: string;
    added: string[];
    kept: string[];   // template names launch.json already had: left as the user wrote them
}

/** Appends the chosen templates to a launch.json text (empty or missing: a new file). */
export function mergeLaunchJson(existing: string | undefined, templates: Templates, names?: string[]): MergeResult {
    const chosen = templates.configurations.filter((c) => !names || names.includes(c.name));
    const text = existing && existing.trim() ? existing : '';
    const errors: ParseError[] = [];
    const doc = (text ? parse(text, errors, { allowTrailingComma: true, disallowComments: false }) : {}) as Record<string, unknown> | undefined;
    if (errors.length) {
        const e = errors[0];
        throw new LaunchJsonError(`launch.json does not parse (${printParseErrorCode(e.error)} at offset ${e.offset}); fix it first, nothing was changed`);
    }
    if (doc === null || typeof doc !== 'object' || Array.isArray(doc)) {
        throw new LaunchJsonError('launch.json is not a JSON object; nothing was changed');
    }
    const existingConfigs = Array.isArray(doc.configurations) ? doc.configurations as { name?: unknown }[] : undefined;
    const have = new Set((existingConfigs ?? []).map((c) => c?.name));
    const toAdd = chosen.filter((c) => !have.has(c.name));
    const kept = chosen.filter((c) => have.has(c.name)).map((c) => c.name);
    const haveInputs = new Set((Array.isArray(doc.inputs) ? doc.inputs as { id?: unknown }[] : []).map((i) => i?.id));
    const inputs = [...new Set(toAdd.flatMap(inputIds))]
        .filter((id) => !haveInputs.has(id))
        .map((id) => templates.inputs.find((i) => i.id === id))
        .filter((i): i is LaunchInput => i !== undefined);

    if (!text) {
        const fresh: Record<string, unknown> = { version: '0.2.0', configurations: toAdd };
        if (inputs.length) {
            fresh.inputs = inputs;
        }
        return { text: JSON.stringify(fresh, null, 4) + '\n', added: toAdd.map((c) => c.name), kept };
    }
    const fmt = formatting(text);
    const root = parseTree(text, [], { allowTrailingComma: true })!;
    const configsNode = findNodeAtLocation(root, ['configurations']);
    const inputsNode = findNodeAtLocation(root, ['inputs']);
    const edits: Insertion[][] = [];
    const props: string[] = [];
    if (doc.version === undefined) {
        props.push(`"version": "0.2.0"`);
    }
    if (configsNode?.type === 'array') {
        edits.push(appendItems(text, configsNode, toAdd.map((c) => JSON.stringify(c, null, fmt.unit)), fmt));
    } else if (toAdd.length) {
        props.push(`"configurations": ${JSON.stringify(toAdd, null, fmt.unit)}`);
    }
    if (inputs.length) {
        if (inputsNode?.type === 'array') {
            edits.push(appendItems(text, inputsNode, inputs.map((i) => JSON.stringify(i, null, fmt.unit)), fmt));
        } else {
            props.push(`"inputs": ${JSON.stringify(inputs, null, fmt.unit)}`);
        }
    }
    if (props.length) {
        edits.push(appendItems(text, root, props, fmt));
    }
    let out = text;
    // Back to front, so earlier offsets stay valid; at one offset, the later insertion first,
    // so the texts end up in the order they were listed.
    const ordered = edits.flat().map((e, i) => ({ ...e, i })).sort((a, b) => b.at - a.at || b.i - a.i);
    for (const e of ordered) {
        out = out.slice(0, e.at) + e.text + out.slice(e.at);
    }
    return { text: out, added: toAdd.map((c) => c.name), kept };
}

interface Insertion {
    at: number;
    text: string;
}

interface Format {
    unit: string;   // one level of indentation
    eol: string;
}

/**
 * Text insertions that append items (array values, or `"key": value` properties) to a JSON
 * array or object without touching what is there: a comma after the last item if it had none,
 * the new items on their own lines at the last item's indentation, after any comment that ends
 * the last item's line. A trailing comma style is kept.
 */
function appendItems(text: string, container: Node, items: string[], fmt: Format): Insertion[] {
    if (!items.length) {
        return [];
    }
    const children = container.children ?? [];
    const closing = container.offset + container.length - 1;  // the ] or }
    const outer = lineIndent(text, container.offset);
    if (!children.length) {
        const inner = outer + fmt.unit;
        return [{ at: closing, text: fmt.eol + items.map((i) => indent(i, inner, fmt.eol)).join(',' + fmt.eol) + fmt.eol + outer }];
    }
    const last = children[children.length - 1];
    const end = last.offset + last.length;
    const inner = lineIndent(text, last.offset);
    let pos = end;
    while (text[pos] === ' ' || text[pos] === '\t') { pos++; }
    const hasComma = text[pos] === ',';
    if (hasComma) { pos++; }
    while (text[pos] === ' ' || text[pos] === '\t') { pos++; }
    if (text.startsWith('//', pos)) {
        pos = text.indexOf('\n', pos);
        pos = pos < 0 ? text.length : text[pos - 1] === '\r' ? pos - 1 : pos;
    }
    const atLineEnd = text[pos] === '\n' || text[pos] === '\r' || pos >= text.length;
    const body = items.map((i) => indent(i, inner, fmt.eol)).join(',' + fmt.eol);
    const text2 = fmt.eol + body + (hasComma ? ',' : '') + (atLineEnd ? '' : fmt.eol + outer);
    if (hasComma) {
        return [{ at: pos, text: text2 }];
    }
    return atLineEnd ? [{ at: end, text: ',' }, { at: pos, text: text2 }] : [{ at: end, text: ',' + text2 }];
}

function indent(item: string, prefix: string, eol: string): string {
    return item.split('\n').map((line) => prefix + line).join(eol);
}

function lineIndent(text: string, offset: number): string {
    const start = text.lastIndexOf('\n', offset - 1) + 1;
    return /^[ \t]*/.exec(text.slice(start, offset))![0];
}

function formatting(text: string): Format {
    const unit = /^([ \t]+)\S/m.exec(text)?.[1] ?? '    ';
    return { unit: unit.includes('\t') ? '\t' : unit, eol: text.includes('\r\n') ? '\r\n' : '\n' };
}
