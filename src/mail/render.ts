// Renders a react-email template to the two parts of a message: HTML and plain text.
// The text part is derived from the rendered HTML with react-email's own converter
// (what `render(…, { plainText: true })` does), so React renders each message once.
import { render, toPlainText } from "@react-email/render";
import { createElement, type ComponentType } from "react";

export interface RenderedEmail {
  html: string;
  text: string;
}

export async function renderEmail<P extends object>(template: ComponentType<P>, props: P): Promise<RenderedEmail> {
  const html = await render(createElement(template, props));
  return { html, text: toPlainText(html) };
}
