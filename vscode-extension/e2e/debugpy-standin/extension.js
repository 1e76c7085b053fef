// Test only: what ms-python.debugpy does at its core, start the real debugpy adapter with the
// Python named by TENSOR_DAP_E2E_PYTHON (the project's venv, which has debugpy and tensor_dap).
const vscode = require('vscode');

exports.activate = (context) => {
    context.subscriptions.push(vscode.debug.registerDebugAdapterDescriptorFactory('debugpy', {
        createDebugAdapterDescriptor: () => new vscode.DebugAdapterExecutable(process.env.TENSOR_DAP_E2E_PYTHON || 'python3', ['-m', 'debugpy.adapter']),
    }));
};
