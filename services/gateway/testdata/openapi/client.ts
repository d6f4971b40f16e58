// A client typed by openapi-typescript from the gateway's OpenAPI document
// (api.d.ts, generated beside this file by TestOpenAPIGeneratedClients):
// it must type-check with tsc --strict.
import type { components, paths } from "./api";

type SubmitJob = components["schemas"]["SubmitJob"];
type Submit = paths["/v1/groups/{groupId}/jobs"]["post"];

// An NDJSON body is text, one SubmitJob per line.
const jobs: SubmitJob[] = [{ jobId: "u-1", type: "email", payload: { to: "ann@example.com" } }];
const ndjson: NonNullable<Submit["requestBody"]>["content"]["application/x-ndjson"] =
  jobs.map((j) => JSON.stringify(j)).join("\n") + "\n";
// A JSON-array body is the jobs themselves.
const array: NonNullable<Submit["requestBody"]>["content"]["application/json"] = jobs;

// A group's event stream is text on the wire; each event, parsed, is a
// GroupStreamEvent, told apart by its name.
type StreamText = paths["/v1/groups/{groupId}/events"]["get"]["responses"][200]["content"]["text/event-stream"];
const wire: StreamText = "event: state\ndata: {}\n\n";

function onGroupEvent(e: components["schemas"]["GroupStreamEvent"]): string {
  switch (e.event) {
    case "state":
      return e.data.state + " " + (e.id ?? "");
    case "progress":
      return String(e.data.succeeded);
    case "notice":
      return e.data.groupId;
  }
}

function onOverview(e: components["schemas"]["OverviewStreamEvent"]): string {
  return e.event + " " + e.data.at;
}

export { ndjson, array, wire, onGroupEvent, onOverview };
