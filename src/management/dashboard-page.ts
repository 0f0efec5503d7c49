/** The dashboard page (GET /): filled in by the dashboard step. */
export const dashboardPage = "<!doctype html><title>Movie</title><p>dashboard</p>";
