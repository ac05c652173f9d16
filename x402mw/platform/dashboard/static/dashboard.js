// The dashboard's only script: "Copy" buttons beside links (the links work without it).
"use strict";
document.querySelectorAll("button.copy[data-copy]").forEach((button) => {
  if (!navigator.clipboard) return;
  button.hidden = false;
  button.addEventListener("click", async () => {
    await navigator.clipboard.writeText(button.dataset.copy);
    button.firstChild.textContent = "Copied";
  });
});
