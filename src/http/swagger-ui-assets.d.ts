// The two swagger-ui-dist files src/http/docs.ts imports `with { type: "file" }`:
// Bun turns such an import into the file's path (inside the binary once compiled).
declare module "swagger-ui-dist/swagger-ui-bundle.js" {
  const path: string;
  export default path;
}
declare module "swagger-ui-dist/swagger-ui.css" {
  const path: string;
  export default path;
}
