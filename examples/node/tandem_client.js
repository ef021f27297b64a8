#!/usr/bin/env node
// A Tandem client in Node.js: one request, unary or streamed, over TLS or plaintext.
//
//   (cd examples/node && npm ci)      # @grpc/grpc-js and @grpc/proto-loader
//   node examples/node/tandem_client.js --address=localhost:7000 --ca=ca.crt --api_key=KEY \
//       --stream "Write a haiku about routers."
//
// The .proto files are loaded at run time from the repository's proto/ folder (--proto_dir).
'use strict';
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

function parseArgs(argv) {
  const args = {address: 'localhost:7000', max_tokens: 64, timeout: 60,
                proto_dir: path.join(__dirname, '..', '..', 'proto'), prompt: ''};
  for (const a of argv) {
    const m = a.match(/^--([a-z_]+)(?:=(.*))?$/);
    if (!m) args.prompt = a;
    else args[m[1]] = m[2] === undefined ? true : m[2];
  }
  return args;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const def = protoLoader.loadSync('tandem/v1/gateway.proto',
                                   {includeDirs: [args.proto_dir], keepCase: true, longs: Number,
                                    enums: String, defaults: true});
  const {Gateway} = grpc.loadPackageDefinition(def).tandem.v1;
  const creds = args.ca ? grpc.credentials.createSsl(fs.readFileSync(args.ca))
                        : grpc.credentials.createInsecure();
  const client = new Gateway(args.address, creds);
  const metadata = new grpc.Metadata();
  if (args.api_key) metadata.set('authorization', 'Bearer ' + args.api_key);
  const request = {messages: [{role: 'user', content: [{text: args.prompt}]}],
                   sampling: {max_tokens: Number(args.max_tokens)}};
  const options = {deadline: Date.now() + 1000 * Number(args.timeout)};
  const fail = (err) => {
    // RESOURCE_EXHAUSTED and UNAVAILABLE are retryable; retry-after-ms says when.
    const retry = err.metadata && err.metadata.get('retry-after-ms')[0];
    console.error(`${grpc.status[err.code]}: ${err.details}` +
                  (retry ? ` (retry after ${retry} ms)` : ''));
    process.exitCode = 1;
  };

  if (args.stream) {
    const call = client.GenerateStream(request, metadata, options);
    call.on('data', (chunk) => {
      if (chunk.route) console.error(`[${chunk.route.model}: ${chunk.route.reason}]`);
      process.stdout.write(chunk.text);
    });
    call.on('end', () => process.stdout.write('\n'));
    call.on('error', fail);
  } else {
    client.Generate(request, metadata, options, (err, answer) => {
      if (err) return fail(err);
      console.error(`[${answer.route.model}: ${answer.route.reason}]`);
      console.log(answer.text);
    });
  }
}

main();
