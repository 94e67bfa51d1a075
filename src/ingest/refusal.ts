// A write-API request refused as a whole, with the status and the Dutch message the
// client gets; thrown inside the write transaction, so nothing of the batch is stored.
export class Refusal extends Error {
  constructor(
    readonly status: 400 | 404 | 409 | 422,
    message: string,
  ) {
    super(message);
    this.name = "Refusal";
  }
}
