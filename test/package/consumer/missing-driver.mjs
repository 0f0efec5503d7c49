// Imports a persistence backend whose driver (an optional peer dependency) the scratch project did not install and
// prints what was thrown: `node missing-driver.mjs movie/persistence/postgres`.
try {
  await import(process.argv[2]);
  process.stdout.write(`${JSON.stringify({ imported: true })}\n`);
} catch (error) {
  process.stdout.write(
    `${JSON.stringify({ name: error.name, message: error.message, packageName: error.packageName })}\n`,
  );
}
