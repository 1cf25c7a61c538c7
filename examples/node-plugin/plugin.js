#!/usr/bin/env node
// node-guard: an example pai-grpc lifecycle plugin written in Node.js.
//
// It implements pai.v1.LifecyclePluginService for three phases
// (prepare_model_step, before_tool_call, transform_step_stream) and answers
// UNIMPLEMENTED for every other phase. The protos are loaded at runtime from
// the repository's protos/ directory, so there is no code generation step.
//
// Usage: node plugin.js [--address HOST:PORT] [--protos DIR]
// Prints exactly one line, `LISTENING <host:port>`, to stdout once bound;
// everything else goes to stderr.
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PLUGIN_NAME = 'node-guard';
const PLUGIN_VERSION = require('./package.json').version;
const PHASES = [
  'LIFECYCLE_PHASE_PREPARE_MODEL_STEP',
  'LIFECYCLE_PHASE_BEFORE_TOOL_CALL',
  'LIFECYCLE_PHASE_TRANSFORM_STEP_STREAM',
];
const VOICE_INSTRUCTION = 'Answer in the voice of the Node plugin.';
const BLOCK_TEXT = 'Blocked by the Node plugin.';
const REJECT_TEXT = 'The Node plugin refuses destructive tools.';
const FORBIDDEN = /\bforbidden\b/i;
const SECRET = /\bsecret\b/gi;
const REDACTED = '[node-redacted]';
const ABORT_MARKER = 'ABORT-NOW';
const SHUTDOWN_GRACE_MS = 5000;

// ---- logging (stderr only: stdout carries the LISTENING line and nothing else) ----

function log(...args) {
  console.error(`[${PLUGIN_NAME}]`, ...args);
}

// ---- command line ----

function parseArgs(argv) {
  const options = {
    address: '127.0.0.1:0',
    protos: path.resolve(__dirname, '..', '..', 'protos'),
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.indexOf('=');
    const [flag, inline] = eq > 0 ? [arg.slice(0, eq), arg.slice(eq + 1)] : [arg, undefined];
    const value = () => {
      if (inline !== undefined) return inline;
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    if (flag === '--address') options.address = value();
    else if (flag === '--protos') options.protos = path.resolve(value());
    else if (flag === '--help' || flag === '-h') {
      process.stderr.write('usage: node plugin.js [--address HOST:PORT] [--protos DIR]\n');
      process.exit(0);
    } else throw new Error(`unknown argument: ${arg}`);
  }
  return options;
}

// ---- google.protobuf.Value / Struct <-> plain JSON ----
//
// proto-loader (protobufjs) has no JSON mapping for Struct/Value: they arrive
// as ordinary messages, e.g. {kind: 'structValue', structValue: {fields: {...}}},
// and must be sent the same way.

function valueToJs(value) {
  if (value == null) return null;
  switch (value.kind) {
    case 'nullValue':
      return null;
    case 'numberValue':
      return value.numberValue;
    case 'stringValue':
      return value.stringValue;
    case 'boolValue':
      return value.boolValue;
    case 'structValue':
      return structToJs(value.structValue);
    case 'listValue':
      return ((value.listValue && value.listValue.values) || []).map(valueToJs);
    default:
      return null; // kind unset: the Value is empty
  }
}

function structToJs(struct) {
  const out = {};
  const fields = (struct && struct.fields) || {};
  for (const key of Object.keys(fields)) out[key] = valueToJs(fields[key]);
  return out;
}

function jsToValue(js) {
  if (js === null || js === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof js === 'number') {
    if (!Number.isFinite(js)) throw new TypeError('non-finite numbers are not JSON');
    return { numberValue: js };
  }
  if (typeof js === 'string') return { stringValue: js };
  if (typeof js === 'boolean') return { boolValue: js };
  if (Array.isArray(js)) return { listValue: { values: js.map(jsToValue) } };
  if (typeof js === 'object') return { structValue: jsToStruct(js) };
  throw new TypeError(`cannot encode ${typeof js} as google.protobuf.Value`);
}

function jsToStruct(obj) {
  const fields = {};
  for (const key of Object.keys(obj)) fields[key] = jsToValue(obj[key]);
  return { fields };
}

// ---- hook logic ----

function latestUserText(messages) {
  for (let i = (messages || []).length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message.message !== 'user') continue;
    return ((message.user && message.user.content) || [])
      .filter((part) => part.part === 'text')
      .map((part) => part.text.text)
      .join('\n');
  }
  return '';
}

function prepareModelStep(request) {
  const input = request.input || {};
  if (FORBIDDEN.test(latestUserText(input.messages))) {
    return {
      block: {
        reason: 'NODE_POLICY',
        response: { parts: [{ text: { text: BLOCK_TEXT, state: 'PART_STATE_DONE' } }] },
      },
    };
  }
  // Instructions replace as a whole: send the current ones plus ours.
  const current = (input.instructions && input.instructions.messages) || [];
  return {
    continueStep: {
      patch: { instructions: { messages: [...current, { content: VOICE_INSTRUCTION }] } },
    },
  };
}

function beforeToolCall(request) {
  const toolName = request.tool ? request.tool.name : '';
  if (toolName === 'delete_everything') {
    return { reject: { message: REJECT_TEXT } };
  }
  const input = valueToJs(request.input);
  if (
    input !== null &&
    typeof input === 'object' &&
    !Array.isArray(input) &&
    typeof input.city === 'string'
  ) {
    return { replaceInput: { input: jsToValue({ ...input, city: input.city.toUpperCase() }) } };
  }
  return { continueCall: {} };
}

function toStatusError(code, details) {
  const error = new Error(details);
  error.code = code;
  error.details = details;
  return error;
}

// ---- handlers ----

function unary(name, fn) {
  return (call, callback) => {
    try {
      callback(null, fn(call.request));
    } catch (err) {
      log(`${name} failed:`, err && err.stack ? err.stack : err);
      callback(toStatusError(grpc.status.INTERNAL, `${name} failed: ${err.message || err}`));
    }
  };
}

function transformStepStream(call) {
  let state = 'awaiting-start'; // -> 'streaming' -> 'done'
  let chunks = 0;

  const fail = (code, details) => {
    if (state === 'done') return;
    state = 'done';
    log(`TransformStepStream: ${details}`);
    call.emit('error', toStatusError(code, details));
  };
  const finish = () => {
    if (state === 'done') return;
    state = 'done';
    call.end();
  };
  // After answering early (abort), keep the call open until the runtime half-closes:
  // ending it while the runtime still writes races in some gRPC stacks (grpc/grpc#36066).
  const answered = () => {
    if (state === 'done') return;
    state = 'answered';
  };

  call.on('data', (request) => {
    if (state === 'done' || state === 'answered') return; // chunks after the answer: drained
    try {
      if (state === 'awaiting-start') {
        if (request.message !== 'start') {
          fail(
            grpc.status.INVALID_ARGUMENT,
            `the first TransformStepStream message must be start, got ${request.message || 'nothing'}`,
          );
          return;
        }
        state = 'streaming';
        return;
      }
      switch (request.message) {
        case 'chunk': {
          chunks++;
          const chunk = request.chunk;
          if (chunk.chunk === 'textDelta') {
            const text = chunk.textDelta.text;
            if (text.includes(ABORT_MARKER)) {
              call.write({
                abort: { reason: 'NODE_ABORT', outcome: 'RUN_OUTCOME_BLOCKED' },
              });
              answered();
              return;
            }
            call.write({
              chunk: { textDelta: { ...chunk.textDelta, text: text.replace(SECRET, REDACTED) } },
            });
            return;
          }
          call.write({ chunk });
          return;
        }
        case 'end':
          call.write({
            uiData: { name: 'node-stats', data: jsToValue({ chunks }), transient: false },
          });
          call.write({ end: {} });
          finish();
          return;
        case 'start':
          fail(grpc.status.INVALID_ARGUMENT, 'start may only be the first message');
          return;
        default:
          fail(grpc.status.INVALID_ARGUMENT, 'empty TransformStepStreamRequest');
      }
    } catch (err) {
      log('TransformStepStream failed:', err && err.stack ? err.stack : err);
      fail(grpc.status.INTERNAL, `TransformStepStream failed: ${err.message || err}`);
    }
  });
  call.on('end', () => {
    if (state === 'answered') {
      finish(); // the runtime read the answer and half-closed
      return;
    }
    // The runtime half-closed without sending `end`: a protocol error.
    if (state !== 'done') fail(grpc.status.INVALID_ARGUMENT, 'stream closed before end');
  });
  call.on('cancelled', () => {
    state = 'done';
  });
}

function unimplementedUnary(name) {
  return (_call, callback) =>
    callback(toStatusError(grpc.status.UNIMPLEMENTED, `${PLUGIN_NAME} does not implement ${name}`));
}

function unimplementedStream(name) {
  return (call) =>
    call.emit(
      'error',
      toStatusError(grpc.status.UNIMPLEMENTED, `${PLUGIN_NAME} does not implement ${name}`),
    );
}

// ---- server ----

function loadService(protoRoot) {
  const definition = protoLoader.loadSync('pai/v1/lifecycle_plugin_service.proto', {
    includeDirs: [protoRoot], // google/protobuf/*.proto come bundled with protobufjs
    keepCase: false,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).pai.v1.LifecyclePluginService.service;
}

function main() {
  let options;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (err) {
    log(err.message);
    process.exit(2);
  }

  const service = loadService(options.protos);
  const server = new grpc.Server();
  server.addService(service, {
    Describe: unary('Describe', () => ({
      name: PLUGIN_NAME,
      phases: PHASES,
      version: PLUGIN_VERSION,
    })),
    PrepareModelStep: unary('PrepareModelStep', prepareModelStep),
    BeforeToolCall: unary('BeforeToolCall', beforeToolCall),
    TransformStepStream: transformStepStream,
    PrepareRun: unimplementedUnary('PrepareRun'),
    ResolveModelContext: unimplementedStream('ResolveModelContext'),
    PrepareHistoryRewrite: unimplementedUnary('PrepareHistoryRewrite'),
    HistoryRewritten: unimplementedUnary('HistoryRewritten'),
    AroundModelCall: unimplementedStream('AroundModelCall'),
    AfterToolResult: unimplementedUnary('AfterToolResult'),
    AfterStep: unimplementedUnary('AfterStep'),
  });

  server.bindAsync(options.address, grpc.ServerCredentials.createInsecure(), (err, port) => {
    if (err) {
      log(`cannot bind ${options.address}: ${err.message}`);
      process.exit(1);
    }
    const host = options.address.slice(0, options.address.lastIndexOf(':'));
    process.stdout.write(`LISTENING ${host}:${port}\n`);
    log(`serving ${PHASES.join(', ')} on ${host}:${port}`);
  });

  let stopping = false;
  const stop = (signal) => {
    if (stopping) return;
    stopping = true;
    log(`${signal}: shutting down`);
    const force = setTimeout(() => {
      log('grace period over: forcing shutdown');
      server.forceShutdown();
      setImmediate(() => process.exit(0));
    }, SHUTDOWN_GRACE_MS);
    force.unref();
    server.tryShutdown(() => {
      clearTimeout(force);
      process.exit(0);
    });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

if (require.main === module) main();

module.exports = { valueToJs, jsToValue, structToJs, jsToStruct, prepareModelStep, beforeToolCall };
