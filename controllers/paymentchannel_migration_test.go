package controllers

import "testing"

func TestMigrationJobGolden(t *testing.T) {
	pc := builderChannel()
	job, err := buildMigrationJob(pc, pc.Spec.Callbackd.Image, "db0123abcd")
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	golden(t, "job-migration", job)
}

// TestMigrationJobName: the name is stable for one (database, image) pair and changes with
// either, so each pair is migrated exactly once.
func TestMigrationJobName(t *testing.T) {
	pc := builderChannel()
	name := func(image, db string) string {
		t.Helper()
		job, err := buildMigrationJob(pc, image, db)
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		return *job.Name
	}
	base := name("img:v1", "db1")
	if again := name("img:v1", "db1"); again != base {
		t.Fatalf("same pair: expected the same name %s, got %s", base, again)
	}
	if other := name("img:v2", "db1"); other == base {
		t.Fatalf("new image: expected a new name, got %s again", base)
	}
	if other := name("img:v1", "db2"); other == base {
		t.Fatalf("new database: expected a new name, got %s again", base)
	}
	if len(base) > 63 {
		t.Fatalf("name %s: expected at most 63 characters, got %d", base, len(base))
	}
}
